"""One lookahead step's token layout: input ids, logical positions and the tree attention mask.

Order of the q = 1 + L*W + T step tokens: [last accepted token | window levels 0..L-1 (W each) | tree nodes].
- the last token (position t) sees the cache and itself;
- window token (l, j) at t + l + j + 1 sees the last token, level 0 columns 0..j and column j of levels
  1..l: exactly the Jacobi sequence that leads to it;
- tree node n at t + depth + 1 sees the last token and its own path;
- the window and the tree never see each other.
A layout may also start with tokens the cache lacks (lookahead parallelism re-feeds tokens verified on another
rank): `root_row` is then the last token's row, and the rows before it are fed causally (see distributed/shard.py).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from functools import lru_cache

import torch

from .tree import TokenTree


@dataclass
class StepLayout:
    input_ids: torch.Tensor  # [1, q]
    offsets: torch.Tensor  # [q] logical position minus the first fed token's position
    visible: torch.Tensor  # [q, q] bool, True where row may attend to column
    tree: TokenTree
    root_row: int  # the last accepted token's row (its logits choose the first new token)
    top_rows: list[int]  # rows whose predictions form the window's next level, one per window column fed
    tree_start: int  # row of tree node 0 (node n is row tree_start + n)

    @property
    def size(self) -> int:
        return self.input_ids.shape[1]

    def logit_rows(self) -> list[int]:
        """The rows whose logits a step uses: the root, the window's top level, the tree nodes."""
        return [self.root_row, *self.top_rows, *range(self.tree_start, self.size)]


@lru_cache(maxsize=64)
def _window_template(levels: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Offsets [L*W] and visibility [L*W, 1 + L*W] of the window block (column 0 = last token)."""
    n = levels * width
    offsets = torch.tensor([l + j + 1 for l in range(levels) for j in range(width)], dtype=torch.long)
    visible = torch.zeros(n, 1 + n, dtype=torch.bool)
    visible[:, 0] = True
    for l in range(levels):
        for j in range(width):
            row = l * width + j
            visible[row, 1 : 1 + j + 1] = True  # level 0, columns 0..j
            for k in range(1, l + 1):  # column j of levels 1..l
                visible[row, 1 + k * width + j] = True
    return offsets, visible


def build_layout(last_token: int, window: torch.Tensor, tree: TokenTree, device: torch.device) -> StepLayout:
    """window: [L, W] current levels (L or W may be 0); tree: the verification candidates for `last_token`."""
    levels, width = window.shape
    n_window, n_tree = levels * width, len(tree)
    q = 1 + n_window + n_tree
    win_offsets, win_visible = _window_template(levels, width)

    visible = torch.zeros(q, q, dtype=torch.bool)
    visible[0, 0] = True
    visible[1 : 1 + n_window, : 1 + n_window] = win_visible
    if n_tree:
        start = 1 + n_window
        rows = [start + n for n, path in enumerate(tree.paths) for _ in path]
        cols = [start + a for path in tree.paths for a in path]
        visible[rows, cols] = True
        visible[start:, 0] = True

    offsets = torch.cat([
        torch.zeros(1, dtype=torch.long),
        win_offsets,
        torch.tensor(tree.depths, dtype=torch.long) + 1,
    ])  # [q]
    input_ids = torch.cat([
        torch.tensor([last_token], device=device),
        window.reshape(-1).to(device),
        torch.tensor(tree.tokens, dtype=torch.long, device=device),
    ]).unsqueeze(0)  # [1, q]
    top_rows = list(range(1 + n_window - width, 1 + n_window)) if n_window else []
    return StepLayout(input_ids, offsets.to(device), visible.to(device), tree, 0, top_rows, 1 + n_window)


@dataclass
class BatchLayout:
    """One step's layouts of B rows padded to a common Q with dummy tokens, and the rows whose logits are kept.

    A dummy token (row b, column >= q_b) repeats row b's first token and sees only itself, so every query row
    has at least one visible column and the padding never reaches a real token. `kept` [K] is the union of the
    rows' logit rows (the LM head runs on those only); `lookup[p]` is the index in `kept` of step row p.
    """

    rows: list[StepLayout]
    input_ids: torch.Tensor  # [B, Q]
    offsets: torch.Tensor  # [B, Q]
    visible: torch.Tensor  # [B, Q, Q] bool
    real: torch.Tensor | None  # [B, Q] bool, False for dummy tokens (None: no dummies)
    kept: torch.Tensor  # [K] step rows whose logits are computed (ascending)
    lookup: list[int]  # [Q] index into kept, -1 where a row's logits are not kept
    kept_rows: list[int]  # kept, on the host

    @property
    def size(self) -> int:
        return self.input_ids.shape[1]

    def position_ids(self, first_positions: torch.Tensor) -> torch.Tensor:
        """first_positions: [B] logical position of each row's first fed token -> [B, Q]."""
        return self.offsets + first_positions.unsqueeze(1)

    def kept_index(self, rows: list[int]) -> list[int]:
        return [self.lookup[r] for r in rows]

    def kept_real(self, b: int) -> int:
        """How many kept rows are row b's own tokens (the rest of kept are its dummy tokens): a prefix of kept."""
        return bisect.bisect_left(self.kept_rows, self.rows[b].size)


def stack_layouts(layouts: list[StepLayout]) -> BatchLayout:
    """Pad row layouts to the largest q (dummy tokens appended at the end of each row); one row is not copied."""
    wanted = sorted({r for layout in layouts for r in layout.logit_rows()})
    device = layouts[0].input_ids.device
    q_max = max(layout.size for layout in layouts)
    lookup = [-1] * q_max
    for k, r in enumerate(wanted):
        lookup[r] = k
    kept = torch.tensor(wanted, device=device)  # [K]
    if len(layouts) == 1:
        (one,) = layouts
        return BatchLayout(layouts, one.input_ids, one.offsets[None], one.visible[None], None, kept, lookup, wanted)
    batch = len(layouts)
    input_ids = torch.empty(batch, q_max, dtype=torch.long, device=device)  # [B, Q]
    offsets = torch.zeros(batch, q_max, dtype=torch.long, device=device)  # [B, Q]
    visible = torch.eye(q_max, dtype=torch.bool, device=device).repeat(batch, 1, 1)  # [B, Q, Q]
    real = torch.zeros(batch, q_max, dtype=torch.bool, device=device)  # [B, Q]
    for b, layout in enumerate(layouts):
        q = layout.size
        input_ids[b] = layout.input_ids[0, 0]
        input_ids[b, :q] = layout.input_ids[0]
        offsets[b, :q] = layout.offsets
        visible[b, :q, :q] = layout.visible
        real[b, :q] = True
    return BatchLayout(layouts, input_ids, offsets, visible, real, kept, lookup, wanted)


def cache_visibility(pads: list[int], cached: list[int] | None, past: int, device: torch.device
                     ) -> torch.Tensor | None:
    """[B, past] bool: the cache slots each row sees, its own tokens: from its left padding `pads[b]` up to
    `cached[b]` (None: every row caches `past` slots); None when every row sees every slot."""
    if not any(pads) and (cached is None or all(c == past for c in cached)):
        return None
    slots = torch.arange(past, device=device)  # [C]
    visible = slots >= torch.tensor(pads, device=device)[:, None]  # [B, C]
    if cached is not None:
        visible &= slots < torch.tensor(cached, device=device)[:, None]
    return visible


def step_visibility(batch: BatchLayout, cache_visible: torch.Tensor | None) -> torch.Tensor:
    """[B, Q, C + Q] bool: what each step token may attend to over [cache | step]. cache_visible: [B, C] (each row's
    valid cache slots); dummy tokens see no cache slot."""
    prefix = cache_visible.unsqueeze(1).expand(-1, batch.size, -1)  # [B, Q, C]
    if batch.real is not None:
        prefix = prefix & batch.real.unsqueeze(2)
    return torch.cat([prefix, batch.visible], dim=2)


def additive_mask(batch: BatchLayout, past: int, cache_visible: torch.Tensor | None,
                  dtype: torch.dtype) -> torch.Tensor:
    """[B, 1, Q, past + Q] additive float mask (0 = attend, dtype min = blocked) of a step over `past` cached slots;
    cache_visible: [B, past] bool, or None when every row sees every slot."""
    blocked = torch.finfo(dtype).min
    if cache_visible is None:
        rows, q, _ = batch.visible.shape
        mask = torch.zeros(rows, q, past + q, dtype=dtype, device=batch.visible.device)
        mask[:, :, past:].masked_fill_(~batch.visible, blocked)
    else:
        allowed = step_visibility(batch, cache_visible)  # [B, Q, past + Q]
        mask = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(~allowed, blocked)
    return mask.unsqueeze(1)
