"""TokenTree: the verification branch, candidate continuations merged into a trie."""

from __future__ import annotations

from collections.abc import Sequence


class TokenTree:
    """A trie over candidate continuations of the last accepted token (the implicit root, index -1).

    Shared prefixes become one node, so each distinct draft is computed once. Nodes are numbered in
    insertion order, so a parent always precedes its children.
    tokens[n]: node n's token; parents[n]: its parent (-1 = root); depths[n]: 0 for the root's children;
    paths[n]: the nodes from the root's child down to n (inclusive).
    """

    def __init__(self, candidates: Sequence[Sequence[int]]) -> None:
        self.tokens: list[int] = []
        self.parents: list[int] = []
        self.depths: list[int] = []
        self.paths: list[list[int]] = []
        self._children: dict[tuple[int, int], int] = {}
        for candidate in candidates:
            self._insert(candidate)

    def _insert(self, candidate: Sequence[int]) -> None:
        parent = -1
        for token in candidate:
            node = self._children.get((parent, token))
            if node is None:
                node = len(self.tokens)
                self._children[(parent, token)] = node
                self.tokens.append(token)
                self.parents.append(parent)
                self.depths.append(0 if parent < 0 else self.depths[parent] + 1)
                self.paths.append((self.paths[parent] if parent >= 0 else []) + [node])
            parent = node

    def child(self, node: int, token: int) -> int | None:
        """The child of `node` (-1 = root) holding `token`, if drafted."""
        return self._children.get((node, token))

    def children(self, node: int) -> list[int]:
        return [n for n, p in enumerate(self.parents) if p == node]

    def __len__(self) -> int:
        return len(self.tokens)
