"""Lookahead parallelism's sharding rule and one rank's share of a step's layout.

Rank r of R computes window columns j with j % R == r and verification candidates i with i % R == r
(candidates in the pool's order). Every rank feeds all of window level 0, because column j's Jacobi
trajectory attends to level-0 columns 0..j; levels 1.. are fed only for its own columns. Tokens dropped
from the single-process layout are invisible to every kept token, so each kept row's logits are exactly
those of the single-process step.

A rank also feeds, before the root, the accepted tokens whose KV it does not hold yet (drafts that were
verified on another rank): `pending` = [those tokens..., last accepted token].
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from ..layout import StepLayout, build_layout
from ..tree import TokenTree


def own_columns(width: int, rank: int, world: int) -> list[int]:
    return list(range(rank, width, world))


def own_candidates(candidates: Sequence[Sequence[int]], rank: int, world: int) -> list[Sequence[int]]:
    return list(candidates[rank::world])


def shard_layout(pending: Sequence[int], window: torch.Tensor, columns: Sequence[int], tree: TokenTree,
                 device: torch.device) -> StepLayout:
    """pending: tokens not in this rank's cache (last = root); window: [L, W] full levels; columns: own columns.
    -> this rank's layout [pending before the root | root | level 0 and own columns of later levels | tree]."""
    full = build_layout(pending[-1], window, tree, device)
    levels, width = window.shape
    own = set(columns)
    cells = [(l, j) for l in range(levels) for j in range(width) if l == 0 or j in own]
    keep = [0] + [1 + l * width + j for l, j in cells] + list(range(full.tree_start, full.size))
    index = torch.tensor(keep, device=device)  # [k]
    p = len(pending) - 1  # pending tokens before the root
    q = p + len(keep)
    visible = torch.zeros(q, q, dtype=torch.bool, device=device)
    visible[:p, :p] = torch.ones(p, p, dtype=torch.bool, device=device).tril()  # causal prefix
    visible[p:, :p] = True
    visible[p:, p:] = full.visible[index][:, index]
    offsets = torch.cat([torch.arange(p, device=device), full.offsets[index] + p])  # [q]
    input_ids = torch.cat([torch.tensor(list(pending[:-1]), dtype=torch.long, device=device),
                           full.input_ids[0, index]]).unsqueeze(0)  # [1, q]
    top_rows = [p + 1 + i for i, (l, j) in enumerate(cells) if l == levels - 1 and j in own]
    return StepLayout(input_ids, offsets, visible, tree, root_row=p, top_rows=top_rows, tree_start=p + 1 + len(cells))
