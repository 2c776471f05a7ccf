"""NGramPool: candidate continuations keyed by their first token, least-recently-used per key."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from ..config import LookaheadConfig


class NGramPool:
    """Maps a token to continuations of `ngram_size - 1` tokens; `candidates` returns at most `guess_set_size`.

    A key keeps its `capacity` (default: `guess_set_size`) most recently added continuations, each with the
    token seen just before its n-gram (None for the window's n-grams). Re-adding a continuation refreshes it.
    `candidates(key, before)` lists first the continuations last seen after `before` (a two-token context
    match, as prompt lookup decoding uses), then the others, most recent first within each group; with a
    capacity above the guess set size this picks the best-matching continuations of a frequent key.
    With `match_tokens=2` only continuations seen after `before` are candidates at all.
    """

    def __init__(self, ngram_size: int, guess_set_size: int, capacity: int | None = None,
                 match_tokens: int = 1) -> None:
        self.ngram_size = ngram_size
        self.guess_set_size = guess_set_size
        self.capacity = guess_set_size if capacity is None else capacity
        self.match_tokens = match_tokens
        if self.capacity < guess_set_size:
            raise ValueError(f"pool capacity {self.capacity} is below guess_set_size={guess_set_size}")
        self._table: dict[int, OrderedDict[tuple[int, ...], int | None]] = {}

    @classmethod
    def for_config(cls, config: LookaheadConfig) -> "NGramPool":
        """The pool of a lookahead config (empty when lookahead is disabled)."""
        guesses = config.guess_set_size if config.enabled else 0
        return cls(config.ngram_size, guesses, config.pool_capacity, config.pool_match_tokens)

    def add(self, ngram: Sequence[int], before: int | None = None) -> None:
        if len(ngram) != self.ngram_size:
            raise ValueError(f"expected an n-gram of {self.ngram_size} tokens, got {len(ngram)}")
        if self.guess_set_size == 0:
            return
        entries = self._table.setdefault(ngram[0], OrderedDict())
        continuation = tuple(ngram[1:])
        known = entries.pop(continuation, None)
        entries[continuation] = known if before is None else before
        if len(entries) > self.capacity:
            entries.popitem(last=False)

    def add_all(self, ngrams: Iterable[Sequence[int]]) -> None:
        for ngram in ngrams:
            self.add(ngram)

    def add_tail(self, tokens: Sequence[int] | torch.Tensor, new: int) -> None:
        """Add, in order, the n-grams of `tokens` (a list or a 1-D tensor) that end in its last `new` tokens, each
        with its preceding token; only the last `new` + ngram_size tokens are read."""
        n = self.ngram_size
        tail = tokens[-(new + n) :]
        tail = tail.tolist() if isinstance(tail, torch.Tensor) else tail
        for i in range(max(0, len(tail) - new - n + 1), len(tail) - n + 1):
            self.add(tail[i : i + n], tail[i - 1] if i else None)

    def add_sequence(self, tokens: Sequence[int]) -> None:
        """Add every n-gram of a token sequence, in order (the last one ends up most recent)."""
        self.add_tail(tokens, len(tokens))

    def candidates(self, key: int, before: int | None = None) -> list[tuple[int, ...]]:
        """At most guess_set_size continuations of `key`; with match_tokens=2, only those seen after `before`."""
        entries = self._table.get(key)
        if not entries:
            return []
        recent = list(reversed(entries.items()))
        if self.match_tokens == 2:
            recent = [item for item in recent if item[1] == before]
        elif before is not None:
            recent.sort(key=lambda item: item[1] != before)  # stable: most recent first within each group
        return [continuation for continuation, _ in recent[: self.guess_set_size]]

    def __len__(self) -> int:
        return sum(len(v) for v in self._table.values())
