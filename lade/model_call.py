"""How lade runs the model: the prefill and the tree steps, through the model's public forward only."""

from __future__ import annotations

import inspect

import torch
from transformers.cache_utils import Cache

from .attention import AttentionPath, attention_path
from .layout import BatchLayout


def logits_width(model) -> int:
    """The vocabulary size of the model's logits."""
    head = model.get_output_embeddings()
    return head.out_features if head is not None else model.config.get_text_config(decoder=True).vocab_size


class ModelCall:
    """Decoder-only forwards with the tree mask of the chosen attention path and logical position ids."""

    def __init__(self, model, cache: Cache, attention: str = "auto") -> None:
        self.model = model
        self.cache = cache
        self.attention: AttentionPath = attention_path(attention, model)
        params = inspect.signature(model.forward).parameters
        self._cache_kwarg = "cache" if "cache" in params else "past_key_values"
        self._keeps_rows = "logits_to_keep" in params

    def _logits(self, input_ids, position_ids, attention_mask, keep: torch.Tensor | int | None) -> torch.Tensor:
        """-> logits [B, q, V]; for `keep` (step rows [K], or the last `keep` rows) only [B, K, V], the LM head then
        running on those rows alone where the model supports logits_to_keep."""
        kwargs = {"logits_to_keep": keep} if keep is not None and self._keeps_rows else {}
        logits = self._forward(input_ids, position_ids, attention_mask, **kwargs)
        if keep is None or kwargs:
            return logits
        return logits[:, -keep:] if isinstance(keep, int) else logits[:, keep]

    def _forward(self, input_ids, position_ids, attention_mask, **kwargs) -> torch.Tensor:
        with self.attention.active():
            out = self.model(
                input_ids=input_ids, position_ids=position_ids, attention_mask=attention_mask,
                use_cache=True, return_dict=True, **{self._cache_kwarg: self.cache}, **kwargs,
            )
        return out.logits.float()  # [B, q, V]

    def prefill(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None = None,
                past: int = 0) -> torch.Tensor:
        """input_ids: [B, P] prompts, left-padded with their 2-D attention_mask (None: no padding), of which the first
        `past` tokens are in the cache already -> logits of each last prompt token [B, V].

        Positions count from each row's first real token, exactly as `model.generate` does for padding."""
        return self.last_logits(input_ids, attention_mask, past, 1)[:, -1]

    def last_logits(self, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, past: int,
                    keep: int) -> torch.Tensor:
        """`prefill`, returning the logits of each row's last `keep` positions [B, keep, V]."""
        if attention_mask is None:
            positions = torch.arange(past, input_ids.shape[1], device=input_ids.device).expand(input_ids.shape[0], -1)
        else:
            positions = (attention_mask.long().cumsum(-1) - 1).masked_fill(attention_mask == 0, 0)[:, past:]
        mask = self.attention.prefill_mask(attention_mask)
        return self._logits(input_ids[:, past:], positions, mask, keep)

    def step(self, batch: BatchLayout, first_positions: torch.Tensor, past: int,
             cache_visible: torch.Tensor | None) -> torch.Tensor:
        """One fused lookahead step for B rows after `past` cached slots: first_positions [B] logical position of each
        row's first fed token; cache_visible [B, past] bool (None: every row sees every slot) -> logits of the
        kept rows [B, K, V] (batch.kept)."""
        if batch.size == 1 and cache_visible is None and self.attention.name == "mask":
            mask = None  # a single token sees the whole cache: the model takes its plain decoding path
        else:
            mask = self.attention.step_mask(batch, past, cache_visible, self.model.dtype)
        return self._logits(batch.input_ids, batch.position_ids(first_positions), mask, batch.kept)
