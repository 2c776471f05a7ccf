"""Every private or undocumented transformers API lade's core touches, in one place, each with why.

transformers has no public way to do these things; when a release moves one of them, this module is the one to
change. Each function names what it reaches; all were checked against transformers 5.20.0 and 5.24.0 (the ends of
pyproject's range, which tests/compat_check.py runs lade against in CI: scripts/compat_ends.sh) and 5.25.0.
tests/core/test_compat_boundary.py reads lade/'s syntax trees and fails on a private transformers name, import or
`__class__` swap anywhere else. Everything else in the core uses public transformers API (AttentionInterface,
Cache, GenerationConfig, logits processors, stopping criteria, generate's `custom_generate` hook).
"""

from __future__ import annotations

import copy
import inspect
import sys
from dataclasses import fields

import torch
from transformers import GenerationConfig, PreTrainedModel
from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor
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


def passed_to_generate(cache) -> bool:
    """Whether `cache` is one the caller passed to `model.generate` (generate marks it `_is_user_defined`, private;
    checked against 5.20.0 and 5.24.0)."""
    return bool(getattr(cache, "_is_user_defined", False))


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


def model_name(config) -> str:
    """The name or path the model was loaded from (`config._name_or_path`, private; "" when built in code)."""
    return getattr(config, "_name_or_path", "") or ""


def plain_sample(model, input_ids: torch.Tensor, **kwargs):
    """transformers' own greedy/sampling loop (`GenerationMixin._sample`, private: what `model.generate` runs once it
    prepared the inputs), called on the model's class so a custom_generate hook on the instance is not re-entered;
    kwargs: generate's (logits_processor, stopping_criteria, generation_config, synced_gpus, streamer, model inputs)."""
    return type(model)._sample(model, input_ids, **kwargs)


def replaces_sample_loop(model) -> bool:
    """Whether the model's class overrides transformers' greedy/sampling loop (`GenerationMixin._sample`, private;
    CSM and Higgs Audio decode several audio codes per step there). Checked against 5.20.0 and 5.24.0."""
    return getattr(type(model), "_sample", GenerationMixin._sample) is not GenerationMixin._sample


def swap_class(obj, cls: type) -> None:
    """Make `obj` (a transformers cache layer) an instance of `cls`, a subclass or base of its class with the same
    state: the same object keeps its tensors, only its methods change (lade.cache.slotted)."""
    obj.__class__ = cls


def replicated_layer_class(cache) -> type | None:
    """The layer class a lazily built cache adds layers of (`layer_class_to_replicate`, undocumented; None for a
    cache built with its layers)."""
    return getattr(cache, "layer_class_to_replicate", None)


def set_replicated_layer_class(cache, cls: type) -> None:
    """Set the layer class a lazily built cache adds its next layers of (see `replicated_layer_class`)."""
    cache.layer_class_to_replicate = cls


def repetition_penalty_for_row(proc, index: int):
    """The processor as one batch row sees it: generate gives RepetitionPenaltyLogitsProcessor each row's padding
    length as a tensor (`prompt_ignore_length`, undocumented), which a processor called with one row's ids [1, S] must
    hold as that row's int; any other processor unchanged."""
    if isinstance(proc, RepetitionPenaltyLogitsProcessor) and isinstance(proc.prompt_ignore_length, torch.Tensor):
        proc = copy.copy(proc)
        proc.prompt_ignore_length = int(proc.prompt_ignore_length[index])
    return proc


# transformers' dynamic-NTK rotary modules (`dynamic_rope_update`, modeling_rope_utils) keep their state in
# undocumented attributes: `max_seq_len_cached` (or `<layer type>_max_seq_len_cached` for per-layer RoPE), the
# `original_max_seq_len` growth resets to, and `attention_scaling`.

def dynamic_rope_cached(module: torch.nn.Module, layer_type: str | None) -> int:
    """The seq_len a dynamic rotary module's current frequencies were computed for."""
    own = getattr(module, f"{layer_type}_max_seq_len_cached", None) if layer_type else None
    return int(own if own is not None else module.max_seq_len_cached)


def dynamic_rope_original(module: torch.nn.Module) -> int:
    """The length a dynamic rotary module resets its frequencies at (its max_position_embeddings)."""
    return int(module.original_max_seq_len)


def dynamic_rope_state(module: torch.nn.Module) -> dict:
    """The attributes (beside its buffers) that a dynamic rotary module changes as it grows or resets."""
    return {k: v for k, v in vars(module).items() if "max_seq_len_cached" in k or "attention_scaling" in k}
