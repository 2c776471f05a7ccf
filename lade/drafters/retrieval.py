"""Retrieval drafting: continuations of the longest suffix of the output that occurred before, in the prompt, the
output so far or an encoder-decoder model's source (prompt lookup decoding with unbounded-length matches).

`SuffixIndex` indexes every n-gram (n <= max_n) of a growing token sequence by its end positions; a query walks n
from max_n down and returns the continuations after the most recent earlier occurrences, each with the length of
its match (extended backwards past max_n, up to MAX_MATCH tokens): a longer match predicts a likelier continuation.
"""

from __future__ import annotations

from collections.abc import Sequence

MAX_MATCH = 64  # backward extension of a match past max_n (longer matches all count as this long)


class SuffixIndex:
    def __init__(self, max_n: int = 8) -> None:
        self.max_n = max_n
        self.tokens: list[int] = []
        self.ends: dict[tuple[int, ...], list[int]] = {}  # n-gram -> end positions, ascending

    def extend(self, tokens: Sequence[int]) -> None:
        for token in tokens:
            self.tokens.append(int(token))
            end = len(self.tokens) - 1
            for n in range(1, min(self.max_n, end + 1) + 1):
                self.ends.setdefault(tuple(self.tokens[end - n + 1 : end + 1]), []).append(end)

    def _match_length(self, end: int, tail: Sequence[int], n: int) -> int:
        """How many tokens before and including `end` equal the last tokens of `tail` (n are known to)."""
        length = n
        while length < min(MAX_MATCH, end + 1, len(tail)) and self.tokens[end - length] == tail[-length - 1]:
            length += 1
        return length

    def continuations(self, tail: Sequence[int], count: int, length: int) -> list[tuple[tuple[int, ...], int]]:
        """At most `count` distinct continuations of up to `length` tokens after occurrences of the longest suffixes
        of `tail`, most recent first within each suffix length: [(continuation, match length)]. An occurrence at the
        index's last position has no continuation (for the output's own index: the suffix itself)."""
        limit = len(self.tokens) - 1
        found: list[tuple[tuple[int, ...], int]] = []
        seen: set[tuple[int, ...]] = set()
        for n in range(min(self.max_n, len(tail)), 0, -1):
            for end in reversed(self.ends.get(tuple(tail[-n:]), ())):
                if end >= limit:
                    continue
                continuation = tuple(self.tokens[end + 1 : end + 1 + length])
                if continuation and continuation not in seen:
                    seen.add(continuation)
                    match = self._match_length(end, tail, n) if n == self.max_n else n
                    found.append((continuation, match))
                    if len(found) >= count:
                        return found
        return found
