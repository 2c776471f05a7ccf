"""BART / mBART (learned table, offset 2) and Marian / Pegasus (sinusoidal table): absolute positions.

In transformers 5.24 these decoders compute `position_ids = arange(q) + cache_length` and pass them to
`decoder.embed_positions(..., position_ids=...)`; both kinds of table take a 1-D [q] position_ids there.
The adapter replaces that keyword with the step's logical positions, for lade's forward in this thread only
(lade.scoped); the table's own forward (offset, sinusoids) does the rest.
"""

from __future__ import annotations

from contextlib import AbstractContextManager

import torch

from ..compat import EMBED_POSITIONS_FORWARD
from ..scoped import original, overriding


def logical_positions(decoder: torch.nn.Module, positions: torch.Tensor) -> AbstractContextManager:
    """positions: [q] logical positions of the step's decoder tokens."""
    table = decoder.embed_positions
    own_forward = original(table, EMBED_POSITIONS_FORWARD)

    def forward(*args, position_ids: torch.Tensor, **kwargs) -> torch.Tensor:
        if position_ids.shape != positions.shape:
            raise RuntimeError(f"lade position adapter: expected {tuple(positions.shape)} positions, the decoder "
                               f"asked for {tuple(position_ids.shape)}")
        return own_forward(*args, position_ids=positions.to(position_ids.device), **kwargs)

    return overriding([(table, EMBED_POSITIONS_FORWARD, forward)])
