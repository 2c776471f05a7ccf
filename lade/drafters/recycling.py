"""Token recycling (after Luo et al., "Turning Trash into Treasure: Accelerating Inference of Large Language Models
with Token Recycling", arXiv 2408.08696): every forward computes, at every row it keeps, the model's distribution of
the next token after that row's token; the top-k of it are kept as that token's likely successors in an adjacency
table [V, k], which drafts a tree of successors of successors from the last accepted token.
"""

from __future__ import annotations

import torch


class AdjacencyTable:
    """successors[t] = the top-k next tokens predicted the last time token t was fed (-1: never seen), on the CPU."""

    def __init__(self, vocab_size: int, width: int) -> None:
        self.width = width
        self.successors = torch.full((vocab_size, width), -1, dtype=torch.int32)  # [V, k]
        self._rows: dict[int, list[int]] = {}  # host copies of rows read since the last update

    def update(self, tokens: torch.Tensor, logits: torch.Tensor) -> None:
        """tokens: [K] fed tokens; logits: [K, V] the model's prediction after each. A token fed at several rows
        keeps one row's prediction."""
        top = logits.topk(self.width, dim=-1).indices.to(device="cpu", dtype=torch.int32)  # [K, k]
        self.successors[tokens.to("cpu")] = top
        self._rows.clear()

    def row(self, token: int) -> list[int]:
        """The successors of `token` by rank (empty if never seen)."""
        if token not in self._rows:
            row = self.successors[token].tolist()
            self._rows[token] = [] if row[0] < 0 else row
        return self._rows[token]
