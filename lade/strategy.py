"""How the decoding loop runs in one process: the hooks that lookahead parallelism (lade.distributed) replaces.

A strategy decides what a rank feeds of each row's layout, how the acceptance of a step is agreed on, and how the
set-up is checked. Here, in one process, a rank feeds the whole layout and its own acceptance is final.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import torch

from .drafters import Draft
from .layout import StepLayout, build_layout
from .outputs import LookaheadStats
from .rows import Row
from .sampling import TokenChooser
from .tree import TokenTree
from .verify import Acceptance


class LocalStrategy:
    returns_cache = True  # the returned cache holds exactly the returned sequence but its last token
    adaptive_drafts = True  # "auto" may pick drafters that learn from this process's logits and timings
    stats_type = LookaheadStats

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
