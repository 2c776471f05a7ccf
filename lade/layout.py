"""One lookahead step's token layout: input ids, logical positions and the tree attention mask.

Order of the q = 1 + L*W + T step tokens: [last accepted token | window levels 0..L-1 (W each) | tree nodes].
- the last token (position t) sees the cache and itself;
- window token (l, j) at t + l + j + 1 sees the last token, level 0 columns 0..j and column j of levels
  1..l: exactly the Jacobi sequence that leads to it;
- tree node n at t + depth + 1 sees the last token and its own path;
- the window and the tree never see each other.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import torch

from .tree import TokenTree


@dataclass
class StepLayout:
    input_ids: torch.Tensor  # [1, q]
    offsets: torch.Tensor  # [q] logical position minus the last token's position
    visible: torch.Tensor  # [q, q] bool, True where row may attend to column
    window_tokens: int  # L*W
    window_width: int  # W (0 when the window is empty)
    tree: TokenTree

    @property
    def size(self) -> int:
        return self.input_ids.shape[1]

    @property
    def tree_start(self) -> int:
        return 1 + self.window_tokens

    @property
    def top_level_rows(self) -> slice:
        """Rows whose predictions form the next window level (all step rows)."""
        return slice(1 + self.window_tokens - self.window_width, 1 + self.window_tokens)

    def logit_rows(self) -> torch.Tensor:
        """[1 + W + T] the rows whose logits a step uses: the root, the top window level, the tree nodes.
        In those kept logits, the top level is rows 1..W and tree node n is row `kept_tree_start + n`."""
        return torch.cat([self.offsets.new_zeros(1),
                          torch.arange(self.top_level_rows.start, self.size, device=self.offsets.device)])

    @property
    def kept_tree_start(self) -> int:
        return 1 + self.window_width

    def position_ids(self, last_position: int) -> torch.Tensor:
        return (self.offsets + last_position).unsqueeze(0)  # [1, q]

    def additive_mask(self, past_length: int, dtype: torch.dtype) -> torch.Tensor:
        """[1, 1, q, past + q] additive float mask: 0 = attend, dtype min = blocked."""
        q = self.size
        mask = torch.zeros(1, 1, q, past_length + q, dtype=dtype, device=self.visible.device)
        mask[0, 0, :, past_length:].masked_fill_(~self.visible, torch.finfo(dtype).min)
        return mask


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
    """window: [L, W] current levels; tree: the verification candidates for `last_token`."""
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
    return StepLayout(input_ids, offsets.to(device), visible.to(device), n_window, width if levels else 0, tree)


@dataclass
class BatchLayout:
    """One step's layouts of B rows padded to a common q with dummy tokens.

    A dummy token (row b, column >= q_b) repeats row b's last token and sees only itself, so every query
    row has at least one visible column and the padding never reaches a real token.
    """

    rows: list[StepLayout]
    input_ids: torch.Tensor  # [B, Q]
    offsets: torch.Tensor  # [B, Q]
    visible: torch.Tensor  # [B, Q, Q] bool
    real: torch.Tensor  # [B, Q] bool, False for dummy tokens

    @property
    def size(self) -> int:
        return self.input_ids.shape[1]

    def position_ids(self, last_positions: torch.Tensor) -> torch.Tensor:
        """last_positions: [B] logical position of each row's last token -> [B, Q]."""
        return self.offsets + last_positions.unsqueeze(1)

    def additive_mask(self, cache_visible: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """cache_visible: [B, C] bool (each row's valid cache slots) -> [B, 1, Q, C + Q] additive float mask."""
        batch, past = cache_visible.shape
        allowed = torch.cat([
            self.real.unsqueeze(2) & cache_visible.unsqueeze(1),  # [B, Q, C]
            self.visible,  # [B, Q, Q]
        ], dim=2)
        mask = torch.zeros(batch, 1, self.size, past + self.size, dtype=dtype, device=allowed.device)
        return mask.masked_fill_(~allowed.unsqueeze(1), torch.finfo(dtype).min)


def stack_layouts(layouts: list[StepLayout]) -> BatchLayout:
    """Pad row layouts to the largest q (dummy tokens appended at the end of each row)."""
    q_max = max(layout.size for layout in layouts)
    device = layouts[0].input_ids.device
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
    return BatchLayout(layouts, input_ids, offsets, visible, real)
