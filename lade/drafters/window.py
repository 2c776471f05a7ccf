"""The lookahead window: N-1 Jacobi levels of W guessed tokens, advanced one iteration per step."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from ..config import LookaheadConfig


class LookaheadWindow:
    """levels: [L, W] token ids, L <= N-1 filled levels, level 0 the oldest Jacobi iterate.

    Level l, column j sits `l + j + 1` positions after the last accepted token. Each step the model's
    prediction at every top-level token becomes a new level; once all N-1 levels are filled, each column
    plus its new token is an n-gram for the pool and the oldest level is dropped.
    """

    def __init__(self, first_level: torch.Tensor, ngram_size: int) -> None:
        self.levels = first_level.reshape(1, -1)  # [1, W]
        self.ngram_size = ngram_size

    @classmethod
    def from_prompt(cls, prompt: torch.Tensor, window_size: int, ngram_size: int, seed: int) -> "LookaheadWindow":
        """Seed level 0 with tokens drawn from the prompt (prompt: [P] on any device)."""
        generator = torch.Generator().manual_seed(seed)
        picks = torch.randint(prompt.numel(), (window_size,), generator=generator)  # [W]
        return cls(prompt.reshape(-1)[picks.to(prompt.device)], ngram_size)

    @classmethod
    def for_config(cls, prompt: torch.Tensor, config: LookaheadConfig) -> "LookaheadWindow":
        """The window of a lookahead config: no columns when lookahead is disabled (plain one-token steps)."""
        width = config.window_size if config.enabled else 0
        return cls.from_prompt(prompt, width, config.ngram_size, config.seed)

    @property
    def filled(self) -> int:
        return self.levels.shape[0]

    @property
    def width(self) -> int:
        return self.levels.shape[1]

    def advance(self, new_level: torch.Tensor) -> list[list[int]]:
        """Append the newest Jacobi iterate (new_level: [W]); return the completed n-grams (W lists of N)."""
        grown = torch.cat([self.levels, new_level.reshape(1, -1)])  # [L+1, W]
        if grown.shape[0] < self.ngram_size:  # warm-up: still filling levels
            self.levels = grown
            return []
        self.levels = grown[1:]
        return grown.T.tolist()
