"""What one process feeds and agrees on: the `Strategy` the decoding loop is typed against, and `LocalStrategy`, the
one-process strategy (lookahead parallelism, lade.distributed.ParallelStrategy, is the other).

A strategy decides what a rank feeds of each row's layout, how the acceptance of a step is agreed on, and how the
set-up is checked. In one process, a rank feeds the whole layout and its own acceptance is final.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import Protocol, runtime_checkable

import torch

from .drafters import Draft
from .layout import StepLayout, build_layout
from .outputs import LookaheadStats
from .rows import Row
from .sampling import TokenChooser
from .tree import TokenTree
from .verify import Acceptance


@runtime_checkable
class Strategy(Protocol):
    returns_cache: bool  # whether the returned cache holds exactly the returned sequence but its last token
    adaptive_drafts: bool  # whether "auto" may pick drafters that learn from this process's logits and timings

    def new_stats(self) -> LookaheadStats:
        """The statistics object of one row or of the whole batch."""

    def accepts(self, config) -> bool:
        """Whether this strategy can run `config` (what "auto" may choose)."""

    def setup(self, check: Callable[[], list[int]], resolve: Callable[[], object]) -> tuple:
        """check(): every refusal, no model work, returning each row's padding; resolve(): the config, for which
        "auto" may time the model -> (paddings, config)."""

    def layout(self, row: Row, draft: Draft, device: torch.device) -> StepLayout:
        """What this rank feeds of the row's [last token | window | candidate tree]."""

    def verify(self, choose: TokenChooser, layout: StepLayout, logits: torch.Tensor, row: Row,
               keep_scores: bool) -> Acceptance:
        """logits: [1 + T, V] the root's and the tree nodes' rows -> this rank's acceptance."""

    def first(self, acc: Acceptance) -> Acceptance:
        """The prefill's agreed acceptance (the first new token)."""

    def agree(self, acc: Acceptance, next_level: torch.Tensor | None) -> tuple[list[int], torch.Tensor | None, int]:
        """-> (accepted tokens, the window's next level [W], how many accepted drafts this rank verified itself)."""

    def record(self, stats: LookaheadStats, layouts: list[StepLayout]) -> None:
        """Note what the step fed in the batch's stats."""

    def guard(self) -> AbstractContextManager:
        """Wraps the decoding (lookahead parallelism turns an error on one rank into an error on every rank)."""

    def finish(self) -> None:
        """After the last step."""


class LocalStrategy:
    """Every rank's work in one process: the whole layout fed, its own acceptance final."""

    returns_cache = True  # the returned cache holds exactly the returned sequence but its last token
    adaptive_drafts = True  # "auto" may pick drafters that learn from this process's logits and timings

    def new_stats(self) -> LookaheadStats:
        return LookaheadStats()

    def accepts(self, config) -> bool:
        return True

    def setup(self, check, resolve) -> tuple:
        """(check(): every refusal, no model work, returning each row's padding; resolve(): the config, for which
        "auto" may time the model)."""
        return check(), resolve()

    def layout(self, row: Row, draft: Draft, device: torch.device) -> StepLayout:
        """[last token | window | candidate tree] of one row."""
        return build_layout(int(row.ids[0, -1]), draft.window, TokenTree(draft.candidates), device)

    def verify(self, choose: TokenChooser, layout: StepLayout, logits: torch.Tensor, row: Row,
               keep_scores: bool) -> Acceptance:
        """logits: [1 + T, V] the root's and the tree nodes' rows."""
        return choose.walk(layout.tree, logits, row, keep_scores)

    def first(self, acc: Acceptance) -> Acceptance:
        """The prefill's acceptance (the first new token)."""
        return acc

    def agree(self, acc: Acceptance, next_level: torch.Tensor | None) -> tuple[list[int], torch.Tensor | None, int]:
        """-> (accepted tokens, the window's next level [W], how many accepted drafts this rank verified itself)."""
        return acc.tokens, next_level, len(acc.path)

    def record(self, stats: LookaheadStats, layouts: list[StepLayout]) -> None:
        pass

    def guard(self) -> AbstractContextManager:
        """Wraps the decoding (lookahead parallelism turns an error on one rank into an error on every rank)."""
        return nullcontext()

    def finish(self) -> None:
        pass
