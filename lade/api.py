"""Plain-function entry point: `lade.generate(model, input_ids, lookahead_config=...)`."""

from __future__ import annotations

import torch
from transformers import GenerationConfig, StoppingCriteriaList, StopStringCriteria

from .checks import (
    check_cache_implementation,
    check_mask_shape,
    check_no_inputs_embeds,
    check_token_generation,
    check_token_ids,
    left_padding,
)
from .config import LookaheadConfig
from .decoding import lookahead_generate


def generate(
    model,
    input_ids: torch.LongTensor | None = None,  # [B, P], left-padded when B > 1 (pass attention_mask)
    lookahead_config: LookaheadConfig | dict | str | None = None,
    attention_mask: torch.Tensor | None = None,
    generation_config: GenerationConfig | None = None,
    return_stats: bool = False,
    **generation_kwargs,
):
    """Decode with lookahead through `model.generate(custom_generate=lade.lookahead_generate)`.

    Takes and returns what `model.generate` takes and returns; with `return_stats=True`, a pair
    (that output, LookaheadStats). lookahead_config: a LookaheadConfig, a dict of its fields, "auto" (lade.cost
    chooses for this model and device) or None (the defaults). The attention mask defaults to all ones (never
    inferred from pad ids). lookahead_latency=: a latency model (q -> seconds) for "auto" and adaptive drafts to use
    instead of measuring this model's profile.
    """
    return generate_with(lookahead_generate, model, input_ids, lookahead_config, attention_mask, generation_config,
                         return_stats, **generation_kwargs)


def generate_with(
    method,
    model,
    input_ids: torch.LongTensor | None,  # [B, P]
    lookahead_config: LookaheadConfig | dict | None = None,
    attention_mask: torch.Tensor | None = None,
    generation_config: GenerationConfig | None = None,
    return_stats: bool = False,
    **generation_kwargs,
):
    """`generate` through any lade custom_generate callable `method` (e.g. lade.distributed's)."""
    check_token_generation(model)
    check_no_inputs_embeds(generation_kwargs)
    check_token_ids(model, input_ids)
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    if model.config.is_encoder_decoder:
        check_mask_shape(attention_mask, input_ids)  # the source's mask: any padding side
    else:
        left_padding(attention_mask, input_ids)
    defaults = generation_config or model.generation_config
    check_cache_implementation(generation_kwargs.get("cache_implementation", defaults.cache_implementation))
    input_ids, attention_mask = _heal_tokens(model, input_ids, attention_mask, defaults, generation_kwargs)
    _move_stop_strings_to_criteria(generation_kwargs)
    generation_kwargs["lookahead_streamer"] = generation_kwargs.pop("streamer", None)
    if model.config.is_encoder_decoder:  # the source's n-grams seed the pool (generate hands over only the decoder ids)
        generation_kwargs.setdefault("lookahead_source_ids", input_ids)
    wants_dict = generation_kwargs.get("return_dict_in_generate", defaults.return_dict_in_generate)
    if return_stats:
        generation_kwargs["return_dict_in_generate"] = True
    out = model.generate(
        input_ids, attention_mask=attention_mask, generation_config=generation_config,
        custom_generate=method, lookahead_config=lookahead_config, **generation_kwargs,
    )
    if not return_stats:
        return out
    return (out if wants_dict else out.sequences), out.lookahead_stats


def _heal_tokens(model, input_ids: torch.Tensor, attention_mask: torch.Tensor, defaults: GenerationConfig,
                 kwargs: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """token_healing: transformers (5.24) heals inside generate with `tokenizer=`, which it does not hand on when
    custom_generate is a callable; heal here exactly as plain generate would (`model.heal_tokens`) and decode the healed
    prompt [1, P'] with its all-ones mask."""
    if not kwargs.get("token_healing", defaults.token_healing):
        return input_ids, attention_mask
    if kwargs.get("tokenizer") is None:
        raise ValueError("token_healing needs the model's tokenizer: pass tokenizer=... as well")
    if model.config.is_encoder_decoder or input_ids.shape[0] != 1 or not bool(attention_mask.all()):
        raise ValueError("token_healing re-tokenizes the prompt, padding a batch on the tokenizer's side without a "
                         "mask to match: pass one unpadded prompt of a decoder-only model at a time")
    kwargs["token_healing"] = False  # healed once, here
    healed = model.heal_tokens(input_ids, kwargs["tokenizer"])  # [1, P']
    return healed, torch.ones_like(healed)


def _move_stop_strings_to_criteria(kwargs: dict) -> None:
    """transformers (5.24) drops `tokenizer=` for callable custom_generate methods, so `stop_strings` would be
    refused; build the same StopStringCriteria here and hand it over as a stopping criterion instead."""
    stop_strings = kwargs.pop("stop_strings", None)
    tokenizer = kwargs.pop("tokenizer", None)
    if stop_strings is None:
        return
    if tokenizer is None:
        raise ValueError("stop_strings need the model's tokenizer: pass tokenizer=... as well")
    criteria = StoppingCriteriaList(kwargs.get("stopping_criteria") or [])
    criteria.append(StopStringCriteria(tokenizer, stop_strings))
    kwargs["stopping_criteria"] = criteria
