"""Per-family position adapters for encoder-decoder decoders.

The decoders of BART- and T5-style models derive positions from the cache length and take no
decoder_position_ids, so tokens that share a logical position in a lookahead step would be placed one
after another. An adapter feeds the step's logical positions to the one place each family computes
positions from, for the duration of one forward of lade's and in its thread only (lade.scoped): plain generate
running the same model in another thread meanwhile computes its own positions, and nothing is left on the model.

Registry: model type -> adapter. An adapter is a context manager factory `(decoder, positions) -> ctx`,
positions: [q] logical positions of the step's decoder tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager

import torch

from . import absolute, relative_bias

PositionAdapter = Callable[[torch.nn.Module, torch.Tensor], AbstractContextManager]

ADAPTERS: dict[str, PositionAdapter] = {
    "bart": absolute.logical_positions,  # learned table, offset 2
    "mbart": absolute.logical_positions,  # learned table, offset 2
    "marian": absolute.logical_positions,  # sinusoidal table
    "pegasus": absolute.logical_positions,  # sinusoidal table
    "t5": relative_bias.logical_positions,
    "mt5": relative_bias.logical_positions,
    "umt5": relative_bias.logical_positions,  # a bias table in every layer
}


def adapter_for(model) -> PositionAdapter:
    """The position adapter of an encoder-decoder model; a clear ValueError for unregistered types."""
    model_type = model.config.model_type
    if model_type not in ADAPTERS:
        raise ValueError(
            f"encoder-decoder model type '{model_type}' has no lade position adapter; supported encoder-decoder "
            f"types: {', '.join(sorted(ADAPTERS))}"
        )
    return ADAPTERS[model_type]
