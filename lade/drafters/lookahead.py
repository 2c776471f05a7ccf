"""The lookahead drafter (arXiv 2402.02057): a Jacobi window whose columns yield n-grams, and an n-gram pool (also
fed by the prompt, an encoder-decoder model's source, and the output) whose continuations of the last token are
verified. Pool-only (window_size=0) and prompt-only (pool_from_output=False) are configurations of it; a disabled
config proposes nothing (plain one-token steps)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from .base import Draft, Outcome
from .pool import NGramPool
from .registry import register
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


def check_lookahead(config: LookaheadConfig) -> None:
    """The lookahead draft's rule: without a window only the pool drafts, so it must hold candidates."""
    if config.window_size == 0 and (config.guess_set_size == 0 or not (config.pool_from_prompt or
                                                                        config.pool_from_output)):
        raise ValueError(
            "window_size=0 leaves only the n-gram pool, so it needs guess_set_size >= 1 and pool_from_prompt or "
            "pool_from_output; for plain decoding use LookaheadConfig(enabled=False)"
        )


def guess_nodes(config: LookaheadConfig) -> int:
    """G candidates of N-1 tokens each: with the window's W(N-1), a step feeds 1 + (W + G)(N - 1) tokens."""
    return config.guess_set_size * config.levels


register("lookahead", lambda config, row: LookaheadDrafter(config, row.prompt, row.source), check=check_lookahead,
         window_size=5, tree_nodes=guess_nodes, same_on_every_rank=True)
