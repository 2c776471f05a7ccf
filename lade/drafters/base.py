"""The drafter contract: a Draft to feed, the Outcome of the step that verified it, the Drafter protocol, and the
Offer through which an adaptive drafter lets the batch size its draft (lade/drafters/allocation.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol

import torch


@dataclass
class Draft:
    """What one row feeds besides its last token: window levels [L, W] (L = 0 or W = 0: no window) and candidate
    continuations of the last token (merged into a tree by the loop)."""

    window: torch.Tensor  # [L, W] token ids
    candidates: list[tuple[int, ...]] = field(default_factory=list)

    def within(self, max_offset: int | None) -> "Draft":
        """This draft with nothing placed more than `max_offset` positions after the last token (a model's position
        table ends there, or its RoPE frequencies change; 0: the last token alone): the window is dropped for the step
        if its top level would pass it, candidates are cut."""
        if max_offset is None:
            return self
        levels, width = self.window.shape
        fits = self.window.numel() == 0 or levels + width - 1 <= max_offset  # the top right token sits at L + W - 1
        window = self.window if fits else self.window[:0]
        candidates = [c[:max_offset] for c in self.candidates if max_offset > 0]
        return Draft(window, [c for c in candidates if c])

    def fitting(self, tokens: int | None) -> "Draft":
        """This draft feeding at most `tokens` tokens (None: no bound): the window is dropped if it alone would not
        fit, then candidates are kept in order while their tokens (an upper bound of their tree's nodes) fit."""
        if tokens is None:
            return self
        window = self.window if self.window.numel() <= tokens else self.window[:0]
        room, kept = tokens - window.numel(), []
        for candidate in self.candidates:
            if len(candidate) > room:
                break
            kept.append(candidate)
            room -= len(candidate)
        return Draft(window, kept)


@dataclass
class Offer:
    """A row's draft nodes for a step whose size the batch decides: values[i] is the expected number of tokens the
    i-th node adds to the step (best first: non-increasing), `fixed` the tokens the row feeds whatever it drafts (its
    last token and window), and take(k) returns the Draft feeding the first k nodes (a tree for every k), which the
    drafter then observes the outcome of."""

    values: list[float]
    fixed: int
    take: Callable[[int], Draft]


@dataclass
class Outcome:
    """What a step produced for one row: the tokens it accepted (drafts, then the model's own next token), the
    window's next Jacobi level [W] (None when no window was fed), the step's kept rows for drafters that learn from
    logits (the token fed at each, inputs [K], and the model's logits there, [K, V]: its prediction of the token after
    it in that row's context), and how many tokens the row fed and how long the forward took."""

    accepted: list[int]
    next_level: torch.Tensor | None
    inputs: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    fed: int = 0  # tokens the row fed in the step
    seconds: float | None = None  # the step's forward time, when the row was decoded alone


class Drafter(Protocol):
    observes_logits: bool  # whether observe() needs the step's inputs and logits (the loop skips them otherwise)

    def propose(self, ids: torch.Tensor, new_tokens: int) -> Draft:
        """ids: [S] the row's tokens so far (prompt and output, no padding); new_tokens: how many the last step
        emitted. Returns the draft to feed with the last token ids[-1].

        A drafter that can also rank its nodes defines `offer(ids, new_tokens) -> Offer` and `rest() -> Draft` (the
        draft of a step that feeds no draft node, without planning one); with adaptive=True the loop then sizes every
        row's draft for the whole batch (lade/drafters/allocation.py) instead of calling propose."""

    def observe(self, outcome: Outcome) -> None:
        """Learn from the step that verified the last draft."""
