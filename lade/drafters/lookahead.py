"""The lookahead drafter (arXiv 2402.02057): a Jacobi window whose columns yield n-grams, and an n-gram pool (also
fed by the prompt, an encoder-decoder model's source, and the output) whose continuations of the last token are
verified. Pool-only (window_size=0) and prompt-only (pool_from_output=False) are configurations of it; a disabled
config proposes nothing (plain one-token steps)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from .base import Draft, Outcome
from .pool import NGramPool
from .window import LookaheadWindow

if TYPE_CHECKING:
    from ..config import LookaheadConfig


class LookaheadDrafter:
    observes_logits = False

    def __init__(self, config: LookaheadConfig, prompt: torch.Tensor, source: torch.Tensor | None = None) -> None:
        """prompt: [P] the row's prompt (no padding); source: [S] an encoder-decoder model's source tokens."""
        self.from_output = config.pool_from_output
        self.window = LookaheadWindow.for_config(prompt, config)
        self.pool = NGramPool.for_config(config)
        if config.pool_from_prompt:
            for context in (source, prompt):
                if context is not None:
                    self.pool.add_sequence(context.tolist())

    def propose(self, ids: torch.Tensor, new_tokens: int) -> Draft:
        if self.from_output:
            self.pool.add_tail(ids, new_tokens)
        before, last = ids[-2:].tolist() if ids.numel() > 1 else (None, int(ids[-1]))
        return Draft(self.window.levels, self.pool.candidates(last, before))

    def observe(self, outcome: Outcome) -> None:
        if outcome.next_level is not None:
            self.pool.add_all(self.window.advance(outcome.next_level))
