"""Plain-function entry point: `lade.generate(model, input_ids, lookahead_config=...)`."""

from __future__ import annotations

import torch
from transformers import GenerationConfig

from .config import LookaheadConfig
from .decoding import lookahead_generate


def generate(
    model,
    input_ids: torch.LongTensor,  # [B, P], left-padded when B > 1 (pass attention_mask)
    lookahead_config: LookaheadConfig | dict | None = None,
    attention_mask: torch.Tensor | None = None,
    generation_config: GenerationConfig | None = None,
    return_stats: bool = False,
    **generation_kwargs,
):
    """Decode with lookahead through `model.generate(custom_generate=lade.lookahead_generate)`.

    Takes and returns what `model.generate` takes and returns; with `return_stats=True`, a pair
    (that output, LookaheadStats). The attention mask defaults to all ones (never inferred from pad ids).
    """
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    wants_dict = generation_kwargs.get(
        "return_dict_in_generate", (generation_config or model.generation_config).return_dict_in_generate
    )
    if return_stats:
        generation_kwargs["return_dict_in_generate"] = True
    out = model.generate(
        input_ids, attention_mask=attention_mask, generation_config=generation_config,
        custom_generate=lookahead_generate, lookahead_config=lookahead_config, **generation_kwargs,
    )
    if not return_stats:
        return out
    return (out if wants_dict else out.sequences), out.lookahead_stats
