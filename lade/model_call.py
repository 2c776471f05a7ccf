"""How lade runs the model: the prefill and the tree steps, through the model's public forward only."""

from __future__ import annotations

import inspect

import torch
from transformers.cache_utils import Cache

from .layout import StepLayout


class ModelCall:
    """Decoder-only forwards with a 4-D additive tree mask and logical position ids ("mask" attention)."""

    def __init__(self, model, cache: Cache) -> None:
        self.model = model
        self.cache = cache
        params = inspect.signature(model.forward).parameters
        self._cache_kwarg = "cache" if "cache" in params else "past_key_values"
        self._keeps_rows = "logits_to_keep" in params

    def _run(self, input_ids, position_ids, attention_mask, rows: torch.Tensor | None = None) -> torch.Tensor:
        """-> logits [q, V], or [len(rows), V] for `rows` only (the LM head then runs on those rows alone)."""
        keep = {"logits_to_keep": rows} if rows is not None and self._keeps_rows else {}
        out = self.model(
            input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask,
            use_cache=True, return_dict=True, **{self._cache_kwarg: self.cache}, **keep,
        )
        logits = out.logits[0]
        return (logits if keep or rows is None else logits[rows]).float()

    def prefill(self, input_ids: torch.Tensor) -> torch.Tensor:
        """input_ids: [1, P] -> logits of the last prompt token [1, V]."""
        positions = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)  # [1, P]
        return self._run(input_ids, positions, None, positions[0, -1:])  # LM head on the last row only

    def step(self, layout: StepLayout, past: int) -> torch.Tensor:
        """One fused lookahead step over `past` cached tokens -> logits of layout.logit_rows() [1 + W + T, V]."""
        # a single token sees the whole cache: no mask, so the model takes its plain decoding path
        mask = layout.additive_mask(past, self.model.dtype) if layout.size > 1 else None  # [1, 1, q, past + q]
        return self._run(layout.input_ids, layout.position_ids(past), mask, layout.logit_rows())
