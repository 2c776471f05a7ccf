"""Drafters: what proposes each row's candidates for the next step and learns from what the step produced.

The loop knows a drafter only through `Drafter` (in the spirit of transformers' CandidateGenerator): `propose`
returns a `Draft` (Jacobi window levels to feed and candidate continuations to verify as a tree), `observe`
receives the step's `Outcome`. The loop owns verification, acceptance, cache compaction and emission, so a new
drafting idea is a new drafter, never a new loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from .base import Draft, Drafter, Outcome
from .lookahead import LookaheadDrafter
from .merged import PlanningDrafter
from .pool import NGramPool
from .window import LookaheadWindow

if TYPE_CHECKING:
    from ..config import LookaheadConfig


def make_drafter(config: LookaheadConfig, prompt: torch.Tensor, source: torch.Tensor | None, vocab_size: int,
                 latency: Callable[[float], float] | None = None, host_s: float = 0.0) -> Drafter:
    """The drafter of `config` for one row: prompt [P] (no padding), source [S] (encoder-decoder models);
    latency: q -> seconds of a q-token step (adaptive drafts)."""
    if config.draft == "lookahead" or not config.enabled:
        return LookaheadDrafter(config, prompt, source)
    return PlanningDrafter(config, prompt, source, vocab_size, latency, host_s)


__all__ = ["Draft", "Drafter", "LookaheadDrafter", "LookaheadWindow", "NGramPool", "Outcome", "PlanningDrafter",
           "make_drafter"]
