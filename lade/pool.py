"""NGramPool: candidate continuations keyed by their first token, least-recently-used per key."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence


class NGramPool:
    """Maps a token to at most `guess_set_size` continuations of `ngram_size - 1` tokens.

    Adding a continuation that is already present refreshes it; a full key evicts its least recently
    added continuation. `candidates(key)` lists the most recent first.
    """

    def __init__(self, ngram_size: int, guess_set_size: int) -> None:
        self.ngram_size = ngram_size
        self.guess_set_size = guess_set_size
        self._table: dict[int, OrderedDict[tuple[int, ...], None]] = {}

    def add(self, ngram: Sequence[int]) -> None:
        if len(ngram) != self.ngram_size:
            raise ValueError(f"expected an n-gram of {self.ngram_size} tokens, got {len(ngram)}")
        if self.guess_set_size == 0:
            return
        entries = self._table.setdefault(ngram[0], OrderedDict())
        continuation = tuple(ngram[1:])
        if continuation in entries:
            entries.move_to_end(continuation)
            return
        entries[continuation] = None
        if len(entries) > self.guess_set_size:
            entries.popitem(last=False)

    def add_all(self, ngrams: Iterable[Sequence[int]]) -> None:
        for ngram in ngrams:
            self.add(ngram)

    def add_sequence(self, tokens: Sequence[int]) -> None:
        """Add every n-gram of a token sequence, in order (the last one ends up most recent)."""
        n = self.ngram_size
        self.add_all(tokens[i : i + n] for i in range(len(tokens) - n + 1))

    def candidates(self, key: int) -> list[tuple[int, ...]]:
        entries = self._table.get(key)
        return list(reversed(entries)) if entries else []

    def __len__(self) -> int:
        return sum(len(v) for v in self._table.values())
