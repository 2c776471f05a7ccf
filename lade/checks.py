"""Up-front checks: refuse what lookahead decoding cannot do exactly, with a message saying what to change."""

from __future__ import annotations

import inspect

import torch
from transformers import GenerationConfig
from transformers.generation.logits_process import LogitsProcessorList

from .config import LookaheadConfig
from .verify import check_processors

MASK_ATTENTION = ("eager", "sdpa")


def resolve_config(value: LookaheadConfig | dict | None, generation_config: GenerationConfig) -> LookaheadConfig:
    if value is None:
        value = getattr(generation_config, "lookahead_config", None)
    if value is None:
        return LookaheadConfig()
    if isinstance(value, LookaheadConfig):
        return value
    if isinstance(value, dict):
        return LookaheadConfig(**value)
    raise ValueError(f"lookahead_config must be a LookaheadConfig or a dict, got {type(value).__name__}")


def check_model(model) -> None:
    model_type = model.config.model_type
    if model.config.is_encoder_decoder:
        raise ValueError(f"encoder-decoder model type '{model_type}' is not supported by lade's decoder-only path")
    if "position_ids" not in inspect.signature(model.forward).parameters:
        raise ValueError(
            f"model type '{model_type}' takes no position_ids (e.g. ALiBi models), so tokens that share a logical "
            "position cannot be placed; lade cannot decode it exactly"
        )
    attn = getattr(model.config, "_attn_implementation", None) or "eager"
    if attn not in MASK_ATTENTION:
        raise ValueError(
            f"attn_implementation='{attn}' cannot take lade's 4-D tree mask; load the model with "
            f"attn_implementation in {MASK_ATTENTION}"
        )


def check_generation(model, input_ids: torch.Tensor, gen: GenerationConfig, processors: LogitsProcessorList,
                     model_kwargs: dict, synced_gpus: bool) -> None:
    check_model(model)
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
    if input_ids.shape[0] != 1:  # after num_beams / num_return_sequences, which expand the batch
        raise ValueError(f"lade decodes one sequence at a time; got batch size {input_ids.shape[0]} (pass one prompt)")
    mask = model_kwargs.get("attention_mask")
    if mask is not None and not bool(mask.all()):
        raise ValueError("lade does not support padded inputs yet: pass an unpadded prompt with an all-ones mask")
