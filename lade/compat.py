"""Every private transformers API lade's core touches, in one place, each with why.

transformers has no public way to do these things; when a release moves one of them, this module is the one to
change, and `tests/test_compat.py` runs lade against an earlier release to show which range it works with.
Everything else in the core uses public transformers API (AttentionInterface, Cache, GenerationConfig, logits
processors, stopping criteria, generate's `custom_generate` hook).
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import fields

import torch
from transformers import GenerationConfig, PreTrainedModel
from transformers.generation.utils import GenerateDecoderOnlyOutput, GenerationMixin

# The attention function an attention layer calls is ALL_ATTENTION_FUNCTIONS[config._attn_implementation], read on
# every forward; masking_utils reads the same name to build masks. lade's paths override this (private) property
# for the current thread while lade's own forward runs (lade.scoped), so the layers call lade's registered function.
ATTN_IMPLEMENTATION = "_attn_implementation"


def attn_implementation(config) -> str | None:
    """The attention implementation a config names (None before a model set it); a sub-config of a composite
    model may name a different one."""
    return config._attn_implementation


def own_attn_implementation(config) -> str | None:
    """What the config itself holds, ignoring lade's override (`_attn_implementation_internal`, the field behind
    the property): the sdpa variant is only used where the user did not choose per-sub-config implementations."""
    return config._attn_implementation_internal


def routes_attention_through_interface(model_class: type[PreTrainedModel]) -> bool:
    """transformers' own test (private) of whether a model class's attention layers call the AttentionInterface
    (its source calls ALL_ATTENTION_FUNCTIONS.get_interface); layers that do not never reach lade's functions."""
    return model_class._can_set_attn_implementation()


def sdpa_attention():
    """transformers' sdpa attention function and mask function: lade_sdpa calls the former where it does not read
    grouped heads in place, and registers the latter as its own mask function (masking_utils' registry)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

    return sdpa_attention_forward, ALL_MASK_ATTENTION_FUNCTIONS


# transformers 5.24 renamed generate's cache keyword and output field from `past_key_values` to `cache`; generate hands
# a custom_generate callable the cache it prepared (the caller's, or a static one) under that name, and lade returns
# its cache under the same name. Every earlier release uses `past_key_values`.
CACHE_KWARG = "cache" if "cache" in {f.name for f in fields(GenerateDecoderOnlyOutput)} else "past_key_values"


def pad_token_tensor(gen: GenerationConfig) -> torch.Tensor | None:
    """The pad id generate resolved (from the config, the tokenizer or eos; set by `_prepare_special_tokens`, which
    plain generate pads finished batch rows with), None outside generate."""
    return getattr(gen, "_pad_token_tensor", None)


def mask_length(gen: GenerationConfig) -> int | None:
    """The length of the attention_mask the caller passed: generate drops an all-ones mask before the decoding loop
    and keeps only this (private) length, which lade checks against input_ids."""
    value = getattr(gen, "_mask_length", None)
    return value if isinstance(value, int) else None


_GENERATE_CODE = inspect.unwrap(GenerationMixin.generate).__code__


def generate_call_arguments() -> dict:
    """`streamer`, `assistant_model` and `synced_gpus` of the `model.generate` call running this custom_generate
    callable, read from generate's frame (sys._getframe): transformers hands a custom_generate callable none of
    them, and none may be silently ignored. {} when not called from generate."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code is _GENERATE_CODE:
            return {name: frame.f_locals.get(name) for name in ("streamer", "assistant_model", "synced_gpus")}
        frame = frame.f_back
    return {}


# Encoder-decoder position adapters (lade.adapters) override, for lade's forward only, where each family computes
# positions; these are model internals, not API:
# - BART/mBART/Marian/Pegasus decoders call `decoder.embed_positions(input, past_length, position_ids=[q])`;
# - T5/mT5/UMT5 self-attentions with a bias table (`has_relative_attention_bias`) bucket key-minus-query distances
#   with the private `_relative_position_bucket`.
EMBED_POSITIONS_FORWARD = "forward"
RELATIVE_POSITION_BUCKET = "_relative_position_bucket"


def relative_bias_attentions(decoder: torch.nn.Module) -> list[torch.nn.Module]:
    """The self-attention modules of a T5-family decoder that compute a relative position bias."""
    return [block.layer[0].SelfAttention for block in decoder.block
            if block.layer[0].SelfAttention.has_relative_attention_bias]


def eos_token_tensor(gen: GenerationConfig) -> torch.Tensor | None:
    """The EOS ids generate resolved (`_prepare_special_tokens`), which plain beam search sizes its top-k and fills its
    sequences with; None outside generate."""
    return getattr(gen, "_eos_token_tensor", None)


# Plain beam search (transformers' vectorised `_beam_search`, 4.50 on) is a loop over private step functions of
# GenerationMixin. lade's beam search replays that loop step by step, feeding each step the logits it looked up in the
# drafted trees; calling transformers' own functions is what makes each replayed step plain beam search's step.
BEAM_STEP_FUNCTIONS = ("_flatten_beam_dim", "_unflatten_beam_dim", "_get_top_k_continuations",
                       "_get_running_beams_for_next_iteration", "_update_finished_beams",
                       "_check_early_stop_heuristic", "_beam_search_has_unfinished_sequences")


class PlainBeamSteps:
    """transformers' beam search step functions, bound to one model, named without their leading underscore."""

    def __init__(self, model) -> None:
        missing = [name for name in BEAM_STEP_FUNCTIONS if not hasattr(model, name)]
        if missing:
            raise ValueError(f"lade's beam search replays transformers' own beam search steps, which this transformers "
                             f"release lacks ({', '.join(missing)}): upgrade transformers, or set num_beams=1")
        for name in BEAM_STEP_FUNCTIONS:
            setattr(self, name[1:], getattr(model, name))
