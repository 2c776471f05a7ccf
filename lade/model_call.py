"""How lade runs the model: the prefill and the tree steps, through the model's public forward only."""

from __future__ import annotations

import inspect

import torch
from transformers.cache_utils import Cache

from .attention import AttentionPath, attention_path
from .layout import BatchLayout, StepLayout


class ModelCall:
    """Decoder-only forwards with the tree mask of the chosen attention path and logical position ids."""

    def __init__(self, model, cache: Cache, attention: str = "auto") -> None:
        self.model = model
        self.cache = cache
        self.attention: AttentionPath = attention_path(attention, model)
        params = inspect.signature(model.forward).parameters
        self._cache_kwarg = "cache" if "cache" in params else "past_key_values"
        self._keeps_rows = "logits_to_keep" in params

    def _run(self, input_ids, position_ids, attention_mask, rows: torch.Tensor | None = None) -> torch.Tensor:
        """-> logits [q, V], or [len(rows), V] for `rows` only (the LM head then runs on those rows alone)."""
        keep = {"logits_to_keep": rows} if rows is not None and self._keeps_rows else {}
        logits = self._forward(input_ids, position_ids, attention_mask, **keep)[0]
        return logits if keep or rows is None else logits[rows]

    def _forward(self, input_ids, position_ids, attention_mask, **kwargs) -> torch.Tensor:
        with self.attention.active():
            out = self.model(
                input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask,
                use_cache=True, return_dict=True, **{self._cache_kwarg: self.cache}, **kwargs,
            )
        return out.logits.float()  # [B, q, V]

    def prefill(self, input_ids: torch.Tensor) -> torch.Tensor:
        """input_ids: [1, P] -> logits of the last prompt token [1, V]."""
        positions = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)  # [1, P]
        return self._run(input_ids, positions, None, positions[0, -1:])  # LM head on the last row only

    def step(self, layout: StepLayout, past: int, all_rows: bool = False) -> torch.Tensor:
        """One fused lookahead step over `past` cached tokens -> logits of layout.logit_rows() [1 + W + T, V]
        (the LM head runs on those rows only), or of every row [q, V] with `all_rows`."""
        if layout.size == 1 and self.attention.name == "mask":
            mask = None  # a single token sees the whole cache: the model takes its plain decoding path
        else:
            mask = self.attention.step_mask(layout, past, self.model.dtype)
        return self._run(layout.input_ids, layout.position_ids(past), mask, None if all_rows else layout.logit_rows())

    def prefill_padded(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Left-padded prompts [B, P] with their 2-D mask -> logits of each last prompt token [B, V].

        Positions count from each row's first real token, exactly as `model.generate` does for padding.
        """
        positions = (attention_mask.long().cumsum(-1) - 1).masked_fill(attention_mask == 0, 0)  # [B, P]
        last = {"logits_to_keep": 1} if self._keeps_rows else {}
        return self._forward(input_ids, positions, attention_mask, **last)[:, -1]

    def step_batch(self, layout: BatchLayout, last_positions: torch.Tensor, cache_visible: torch.Tensor) -> torch.Tensor:
        """One fused step for B rows: last_positions [B], cache_visible [B, C] bool -> logits [B, Q, V]."""
        if self.attention.name != "mask":
            raise ValueError(
                f"batched lookahead runs only through attention='mask' (eager/sdpa models), not "
                f"'{self.attention.name}': decode the prompts one at a time or load the model with "
                "attn_implementation='sdpa'"
            )
        mask = layout.additive_mask(cache_visible, self.model.dtype)  # [B, 1, Q, C + Q]
        return self._forward(layout.input_ids, layout.position_ids(last_positions), mask)
