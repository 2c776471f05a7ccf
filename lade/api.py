"""Plain-function entry point: `lade.generate(model, input_ids, lookahead_config=...)`."""

from __future__ import annotations

import copy

import torch
from transformers import GenerationConfig

from .config import LookaheadConfig
from .decoding import lookahead_generate


def generate(
    model,
    input_ids: torch.LongTensor,  # [1, P]
    lookahead_config: LookaheadConfig | dict | None = None,
    attention_mask: torch.Tensor | None = None,
    generation_config: GenerationConfig | None = None,
    return_stats: bool = False,
    **generation_kwargs,
):
    """Decode with lookahead through `model.generate(custom_generate=...)`.

    Returns what `model.generate` returns for the same kwargs; with `return_stats=True`, a pair
    (that output, LookaheadStats). The attention mask defaults to all ones (never inferred from pad ids).
    """
    if isinstance(lookahead_config, dict):
        lookahead_config = LookaheadConfig(**lookahead_config)
    gen = copy.deepcopy(generation_config or model.generation_config)
    model_kwargs = gen.update(**generation_kwargs)  # what is not a generation parameter goes to generate()
    gen.lookahead_config = lookahead_config or LookaheadConfig()
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    wants_dict = gen.return_dict_in_generate
    if return_stats:
        gen.return_dict_in_generate = True
    out = model.generate(
        input_ids, attention_mask=attention_mask, generation_config=gen,
        custom_generate=lookahead_generate, **model_kwargs,
    )
    if not return_stats:
        return out
    return (out if wants_dict else out.sequences), out.lookahead_stats
