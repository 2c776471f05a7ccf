"""Up-front checks: refuse what lookahead decoding cannot do exactly, with a message saying what to change."""

from __future__ import annotations

import inspect

import torch
from transformers import GenerationConfig
from transformers.generation.logits_process import LogitsProcessorList, PrefixConstrainedLogitsProcessor
from transformers.generation.stopping_criteria import MaxLengthCriteria, MaxTimeCriteria, StoppingCriteriaList

from .adapters import adapter_for
from .config import LookaheadConfig
from .quantization import check_quantized_model
from .verify import check_processors


def resolve_config(value: LookaheadConfig | dict | str | None, generation_config: GenerationConfig,
                   model=None) -> LookaheadConfig:
    if value is None:
        value = getattr(generation_config, "lookahead_config", None)
    if value is None:
        return LookaheadConfig()
    if value == "auto":
        return LookaheadConfig.auto(model)
    if isinstance(value, LookaheadConfig):
        return value
    if isinstance(value, dict):
        return LookaheadConfig(**value)
    raise ValueError(f"lookahead_config must be a LookaheadConfig, a dict or 'auto', got {value!r}")


def check_model(model) -> None:
    model_type = model.config.model_type
    if model.config.is_encoder_decoder:
        adapter_for(model)  # raises a clear error for encoder-decoder types without a position adapter
    elif "position_ids" not in inspect.signature(model.forward).parameters:
        raise ValueError(
            f"model type '{model_type}' takes no position_ids (e.g. ALiBi models), so tokens that share a logical "
            "position cannot be placed; lade cannot decode it exactly"
        )
    check_quantized_model(model)


def check_generation(model, input_ids: torch.Tensor, gen: GenerationConfig, processors: LogitsProcessorList,
                     model_kwargs: dict, synced_gpus: bool) -> None:
    check_model(model)
    if model.config.is_encoder_decoder:
        if input_ids.shape[0] != 1:
            raise ValueError(f"lade decodes encoder-decoder models one input at a time; got batch size "
                             f"{input_ids.shape[0]} (pass one input)")
        mask = model_kwargs.get("decoder_attention_mask")
        if mask is not None and not bool(mask.all()):
            raise ValueError("lade does not support a padded decoder prompt: pass decoder ids with an all-ones mask")
    if gen.num_beams != 1:
        raise ValueError(f"lade does not do beam search; set num_beams=1 (got {gen.num_beams})")
    if gen.num_return_sequences != 1:
        raise ValueError("lade returns one sequence per prompt; set num_return_sequences=1")
    if gen.output_attentions or gen.output_hidden_states:
        raise ValueError("output_attentions / output_hidden_states are not available from lookahead steps")
    if synced_gpus:
        raise ValueError("synced_gpus (DeepSpeed ZeRO-3 / FSDP) is not supported by lade")
    if gen.prompt_lookup_num_tokens or getattr(gen, "assistant_model", None):
        raise ValueError("lade replaces prompt lookup / assisted decoding; do not combine them")
    check_processors(processors)


def left_padding(attention_mask: torch.Tensor) -> list[int]:
    """attention_mask: [B, P] of 0/1 -> each row's number of left-padding slots; refuse any other padding."""
    mask = attention_mask.long()
    if not bool(((mask == 0) | (mask == 1)).all()):
        raise ValueError("attention_mask must hold only 0 (padding) and 1 (token)")
    if not bool((mask[:, 1:] >= mask[:, :-1]).all()) or not bool(mask[:, -1].all()):
        raise ValueError(
            "lade needs left-padded batches (padding only before each prompt): set tokenizer.padding_side='left'"
        )
    return (mask.shape[1] - mask.sum(-1)).tolist()


def check_batch(gen: GenerationConfig, processors: LogitsProcessorList, stopping_criteria: StoppingCriteriaList,
                streamer) -> None:
    """What batched (or padded) lookahead decoding refuses on top of `check_generation`."""
    if any(isinstance(p, PrefixConstrainedLogitsProcessor) for p in processors):
        raise ValueError(
            "prefix_allowed_tokens_fn takes a batch index, which lade's per-row verification cannot supply: "
            "pass one prompt at a time"
        )
    if streamer is not None:
        raise ValueError("a streamer takes one sequence: pass one unpadded prompt to stream lookahead output")
    if gen.return_dict_in_generate and (gen.output_scores or gen.output_logits):
        raise ValueError(
            "output_scores / output_logits are not available for batched lookahead decoding: pass one prompt at a time"
        )
    if not any(hasattr(c, "eos_token_id") for c in stopping_criteria) and not all(
        isinstance(c, (MaxLengthCriteria, MaxTimeCriteria)) for c in stopping_criteria
    ):
        raise ValueError(
            "batched lookahead decoding with stop strings or custom stopping criteria needs an eos_token_id: without "
            "one, plain generate keeps decoding finished rows, which lade does not reproduce"
        )
