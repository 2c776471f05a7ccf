"""How lade runs the model: the prefill and the tree steps, through the model's public forward only."""

from __future__ import annotations

import inspect

import torch
from transformers.cache_utils import Cache

from .attention import AttentionPath, attention_path
from .layout import StepLayout


class ModelCall:
    """Decoder-only forwards with the tree mask of the chosen attention path and logical position ids."""

    def __init__(self, model, cache: Cache, attention: str = "auto") -> None:
        self.model = model
        self.cache = cache
        self.attention: AttentionPath = attention_path(attention, model)
        params = inspect.signature(model.forward).parameters
        self._cache_kwarg = "cache" if "cache" in params else "past_key_values"

    def _run(self, input_ids, position_ids, attention_mask) -> torch.Tensor:
        with self.attention.active():
            out = self.model(
                input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask,
                use_cache=True, return_dict=True, **{self._cache_kwarg: self.cache},
            )
        return out.logits[0].float()  # [q, V]

    def prefill(self, input_ids: torch.Tensor) -> torch.Tensor:
        """input_ids: [1, P] -> logits of the last prompt token [1, V]."""
        positions = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)  # [1, P]
        return self._run(input_ids, positions, None)[-1:]

    def step(self, layout: StepLayout, past: int) -> torch.Tensor:
        """One fused lookahead step over `past` cached tokens -> logits [q, V]."""
        mask = self.attention.step_mask(layout, past, self.model.dtype)
        return self._run(layout.input_ids, layout.position_ids(past), mask)
