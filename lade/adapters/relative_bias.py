"""T5 / mT5 / UMT5: relative position bias.

In transformers 5.24 each self-attention with a bias table computes `relative_position = key index -
(query index + past)` (shape [q, past + q]) and buckets it with `self._relative_position_bucket(...)`
(T5/mT5: a staticmethod with bucket options; UMT5: a method). The adapter swaps in the relative
positions of the step's logical positions, for lade's forward in this thread only (lade.scoped), and keeps the
family's own bucketing and bias table. The cache holds the accepted tokens at positions 0..past-1, the step's tokens
follow at their logical positions.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

import torch

from ..compat import RELATIVE_POSITION_BUCKET, relative_bias_attentions
from ..scoped import original, overriding


def _relative(positions: torch.Tensor, key_length: int) -> torch.Tensor:
    """positions: [q] -> key position minus query position, [q, key_length]."""
    past = key_length - positions.numel()
    keys = torch.cat([torch.arange(past, device=positions.device), positions])  # [past + q]
    return keys[None, :] - positions[:, None]


def _bucket_with(original, positions: torch.Tensor):
    def bucket(relative_position: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        q, key_length = relative_position.shape
        if q != positions.numel() or key_length < q:
            raise RuntimeError(f"lade position adapter: expected {positions.numel()} queries, the decoder computed "
                               f"a bias for {tuple(relative_position.shape)}")
        return original(_relative(positions.to(relative_position.device), key_length), *args, **kwargs)

    return bucket


def logical_positions(decoder: torch.nn.Module, positions: torch.Tensor) -> AbstractContextManager:
    """positions: [q] logical positions of the step's decoder tokens."""
    return overriding([
        (attn, RELATIVE_POSITION_BUCKET, _bucket_with(original(attn, RELATIVE_POSITION_BUCKET), positions))
        for attn in relative_bias_attentions(decoder)
    ])
