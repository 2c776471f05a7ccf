"""A corpus of earlier requests that drafts for later ones (after SuffixDecoding, Oliaro et al., arXiv 2411.04975).

`corpus = lade.Corpus()`, kept by the caller and passed to every call as `lade.generate(..., corpus=corpus)` (or
`model.generate(custom_generate=..., corpus=corpus)`): at the end of each call it stores every row's prompt and
output; during decoding, the planning drafters (retrieval, recycling, merged, corpus, and so "auto") propose what
followed the current suffix in the stored requests (`leads`), each token with its kind: its match length and the
share of the matching occurrences that continued with it (lade/drafters/kinds.py).

Its own acceptance estimate: before storing a request, the corpus drafts for it as a planning drafter would at each
of its output positions (the first MEASURED after the prompt) and counts, per kind, the drafted tokens whose parent
was right (tested) and those that were right too (accepted). The planning drafters start every call from these
counts (lade/drafters/kinds.py `prior_rates`), so a corpus whose continuations rarely hold on a workload is trusted
little from the first step, and one that holds often is trusted more. Past COUNT_LIMIT tests a kind's counts halve,
so the estimate follows the recent requests.

What it stores: token ids of the model's vocabulary, one list per request, at most `max_tokens` tokens in all (the
oldest requests are evicted first; a request longer than the bound keeps its last `max_tokens` tokens), and an
index from each n-gram (n in KEY_LENGTHS) to its occurrences. Every method holds one lock, so threads may share a
corpus. `save(path)` writes JSON (no pickle) with a checksum; `Corpus.load(path)` validates it. The corpus records
its vocabulary (vocabulary size, model type and an optional label the caller gives, e.g. the tokenizer's name) on
first use and refuses a model with another.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Sequence
from pathlib import Path

from .drafters.kinds import Kind, corpus_kind

KEY_LENGTHS = (4, 2, 1)  # n-gram lengths indexed, longest first; a match is extended backwards past them
MAX_MATCH = 32  # backward extension of a match (longer matches count as this long)
SCAN = 32  # most recent occurrences of the longest matching n-gram read per query
TAIL = 64  # the row's last tokens a query matches (its matches are shorter)
DRAFTS = 4  # continuations drafted per query
MEASURED = 256  # output positions of a request at which the corpus measures its own drafts
MEASURED_DEPTH = 8  # tokens of each continuation measured
COUNT_LIMIT = 4096  # a kind's tests past which its counts halve
FORMAT = "lade.Corpus"
VERSION = 2  # 2: with the acceptance counts (a version 1 file loads with none)
_SHIFT = 32  # an occurrence is packed as request number << _SHIFT | end position


class Corpus:
    def __init__(self, max_tokens: int = 100_000, vocabulary: str | None = None) -> None:
        """max_tokens: most tokens kept over all requests (about 0.5 KB of memory each); vocabulary: an optional
        label of the tokenizer (its name or a hash), saved with the corpus and compared by `load(vocabulary=)`."""
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"max_tokens must be a positive integer, got {max_tokens!r}")
        if vocabulary is not None and not isinstance(vocabulary, str):
            raise ValueError(f"vocabulary must be a string label (e.g. the tokenizer's name) or None, got "
                             f"{vocabulary!r}")
        self.max_tokens = max_tokens
        self.vocabulary = vocabulary
        self.vocab_size: int | None = None  # bound on first use (or load)
        self.model_type: str | None = None
        self._lock = threading.Lock()
        self._requests: dict[int, list[int]] = {}  # request number -> tokens, oldest first
        self._next = 0
        self._size = 0
        self._ends: dict[tuple[int, ...], list[int]] = {}  # n-gram -> packed occurrences (by end), oldest first
        self._counts: dict[Kind, list[int]] = {}  # kind -> [accepted, tested] of the corpus's own drafts

    def __len__(self) -> int:
        """Tokens stored."""
        return self._size

    @property
    def requests(self) -> int:
        return len(self._requests)

    def check(self, vocab_size: int, model_type: str | None) -> None:
        """A clear error when the corpus holds token ids of a model with another vocabulary."""
        if self.vocab_size is not None and (self.vocab_size, self.model_type) != (int(vocab_size), model_type):
            raise ValueError(f"this corpus holds token ids of a {self.model_type!r} model with a vocabulary of "
                             f"{self.vocab_size}, not of this {model_type!r} model with {vocab_size}: use a corpus "
                             "per vocabulary (a new lade.Corpus() for this model)")

    def bind(self, vocab_size: int, model_type: str | None) -> None:
        """Record the model's vocabulary on first use (`check` refuses another one)."""
        with self._lock:
            self.check(vocab_size, model_type)
            self.vocab_size, self.model_type = int(vocab_size), model_type

    def add(self, tokens: Sequence[int], prompt_length: int = 0) -> None:
        """Store one request (its prompt and output), evicting the oldest requests past max_tokens; first measure the
        corpus's drafts on its output (the tokens after the first `prompt_length`; 0: the whole request)."""
        if isinstance(prompt_length, bool) or not isinstance(prompt_length, int) or prompt_length < 0:
            raise ValueError(f"prompt_length must be a non-negative integer, got {prompt_length!r}")
        tokens = [int(t) for t in tokens]
        cut = max(0, len(tokens) - self.max_tokens)
        tokens = tokens[cut:]
        with self._lock:
            self._measure(tokens, max(0, prompt_length - cut))
            self._add(tokens)

    def acceptance(self) -> dict[Kind, tuple[int, int]]:
        """kind -> (accepted, tested): how the corpus's own drafts fared on the requests it stored (see above)."""
        with self._lock:
            return {kind: (accepted, tested) for kind, (accepted, tested) in self._counts.items()}

    def _measure(self, tokens: list[int], start: int) -> None:
        """Count, per kind, the drafts `leads` makes at positions start .. start + MEASURED of `tokens` that were
        tested (their parent right) and accepted (right), against the tokens that followed."""
        for last in range(start, min(len(tokens) - 1, start + MEASURED)):
            tested: set[tuple[int, ...]] = set()  # continuations share prefixes: each node counts once
            for continuation, kinds in self._leads(tokens[max(0, last + 1 - TAIL) : last + 1], MEASURED_DEPTH):
                for depth, (token, kind) in enumerate(zip(continuation, kinds)):
                    if last + 1 + depth >= len(tokens):
                        break
                    right = tokens[last + 1 + depth] == token
                    if continuation[: depth + 1] not in tested:
                        tested.add(continuation[: depth + 1])
                        self._count(kind, right)
                    if not right:
                        break

    def _count(self, kind: Kind, accepted: bool) -> None:
        counts = self._counts.setdefault(kind, [0, 0])
        counts[0] += int(accepted)
        counts[1] += 1
        if counts[1] > COUNT_LIMIT:
            counts[0], counts[1] = counts[0] // 2, counts[1] // 2

    def _add(self, tokens: list[int]) -> None:
        if not tokens:
            return
        number, self._next = self._next, self._next + 1
        self._requests[number] = tokens
        self._size += len(tokens)
        for _, end, key in _ngrams(tokens):
            self._ends.setdefault(key, []).append(number << _SHIFT | end)
        while self._size > self.max_tokens:
            self._evict_oldest()

    def _evict_oldest(self) -> None:
        number = next(iter(self._requests))
        tokens = self._requests.pop(number)
        self._size -= len(tokens)
        for _, _, key in _ngrams(tokens):
            ends = self._ends.get(key)
            if ends is None:
                continue  # this key's occurrences of the request are gone already
            first = 0
            while first < len(ends) and ends[first] >> _SHIFT == number:
                first += 1
            del ends[:first]
            if not ends:
                del self._ends[key]

    def leads(self, tokens: Sequence[int], length: int) -> list[tuple[tuple[int, ...], tuple[Kind, ...]]]:
        """What the corpus drafts after `tokens` (a row's tokens, or their last TAIL): at most DRAFTS continuations of
        up to `length` tokens, each token with its kind."""
        tail = tokens[-TAIL:]
        tail = tail.tolist() if hasattr(tail, "tolist") else list(tail)
        with self._lock:
            return self._leads(tail, length)

    def _leads(self, tail: list[int], length: int) -> list[tuple[tuple[int, ...], tuple[Kind, ...]]]:
        return [(tokens, tuple(corpus_kind(match, share, d) for d, share in enumerate(shares)))
                for tokens, match, shares in self._query(tail, DRAFTS, length)]

    def continuations(self, tail: Sequence[int], count: int, length: int
                      ) -> list[tuple[tuple[int, ...], int, tuple[float, ...]]]:
        """At most `count` continuations of up to `length` tokens of the longest indexed suffix of `tail` (the row's
        tokens), most frequent first: [(tokens, match length, shares)], shares[d] being the share of the occurrences
        continuing with tokens[:d] that continue with tokens[d] (their empirical next-token probability)."""
        with self._lock:
            return self._query(tail, count, length)

    def _query(self, tail: Sequence[int], count: int, length: int
               ) -> list[tuple[tuple[int, ...], int, tuple[float, ...]]]:
        for n in KEY_LENGTHS:
            if n > len(tail):
                continue
            ends = self._ends.get(tuple(tail[-n:]))
            if ends:
                return self._continuations(ends[-SCAN:], tail, n, count, length)
        return []

    def _continuations(self, occurrences: list[int], tail: Sequence[int], n: int, count: int, length: int
                       ) -> list[tuple[tuple[int, ...], int, tuple[float, ...]]]:
        found: dict[tuple[int, ...], list[int]] = {}  # continuation -> [occurrences, best match, recency]
        trie: list = [0, {}]  # [occurrences through this node, {token: child}]: the continuations' prefixes
        for recency, packed in enumerate(reversed(occurrences)):
            tokens, end = self._requests[packed >> _SHIFT], packed & ((1 << _SHIFT) - 1)
            continuation = tuple(tokens[end + 1 : end + 1 + length])
            if not continuation:
                continue
            match = n
            while match < min(MAX_MATCH, end + 1, len(tail)) and tokens[end - match] == tail[-match - 1]:
                match += 1
            entry = found.setdefault(continuation, [0, 0, -recency])
            entry[0] += 1
            entry[1] = max(entry[1], match)
            node = trie
            node[0] += 1
            for token in continuation:
                node = node[1].setdefault(token, [0, {}])
                node[0] += 1
        best = sorted(found.items(), key=lambda item: (-item[1][1], -item[1][0], -item[1][2]))[:count]
        return [(c, match, _shares(trie, c)) for c, (_, match, _) in best]

    def save(self, path: str | Path) -> None:
        """Write the corpus as JSON (vocabulary, bound, requests oldest first, its acceptance counts, and a checksum of
        them)."""
        with self._lock:
            body = dict(format=FORMAT, version=VERSION, max_tokens=self.max_tokens, vocabulary=self.vocabulary,
                        vocab_size=self.vocab_size, model_type=self.model_type,
                        requests=list(self._requests.values()),
                        acceptance=[[list(kind), *counts] for kind, counts in self._counts.items()])
        body["sha256"] = _checksum(body)
        Path(path).write_text(json.dumps(body, separators=(",", ":")))

    @classmethod
    def load(cls, path: str | Path, vocabulary: str | None = None) -> Corpus:
        """A corpus written by `save`, validated (a clear error on a damaged or foreign file); `vocabulary`, when
        given, must equal the label it was saved with."""
        try:
            body = json.loads(Path(path).read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ValueError(f"{path} is not a readable lade corpus (damaged or not JSON: {error})") from None
        _validate(body, path)
        if vocabulary is not None and vocabulary != body["vocabulary"]:
            raise ValueError(f"{path} holds a corpus of vocabulary {body['vocabulary']!r}, not {vocabulary!r}: load "
                             "the corpus of this tokenizer or start a new lade.Corpus()")
        corpus = cls(body["max_tokens"], body["vocabulary"])
        corpus.vocab_size, corpus.model_type = body["vocab_size"], body["model_type"]
        for tokens in body["requests"]:
            corpus._add(tokens)
        corpus._counts = {tuple(kind): [accepted, tested] for kind, accepted, tested in body.get("acceptance", [])}
        return corpus


def _shares(trie: list, continuation: tuple[int, ...]) -> tuple[float, ...]:
    """Along `continuation`'s path in the trie: each token's occurrences over its parent's."""
    shares, node = [], trie
    for token in continuation:
        child = node[1][token]
        shares.append(child[0] / node[0])
        node = child
    return tuple(shares)


def _ngrams(tokens: list[int]):
    """(n, end, n-gram) for every indexed n-gram of `tokens`, in the order the index appends them."""
    for end in range(len(tokens)):
        for n in KEY_LENGTHS:
            if n <= end + 1:
                yield n, end, tuple(tokens[end - n + 1 : end + 1])


def _checksum(body: dict) -> str:
    fields = {key: value for key, value in body.items() if key != "sha256"}
    return hashlib.sha256(json.dumps(fields, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _validate(body: object, path: str | Path) -> None:
    """A clear error for anything `save` does not write."""
    def damaged(why: str) -> ValueError:
        return ValueError(f"{path} is not a valid lade corpus ({why}): write it again with Corpus.save")

    keys = {"format", "version", "max_tokens", "vocabulary", "vocab_size", "model_type", "requests", "sha256"}
    if isinstance(body, dict) and body.get("version") == VERSION:
        keys = keys | {"acceptance"}
    if not isinstance(body, dict) or set(body) != keys or body["format"] != FORMAT:
        raise damaged(f"expected a JSON object with the fields {sorted(keys)} and format {FORMAT!r}")
    if body["version"] not in (1, VERSION):
        raise damaged(f"version {body['version']!r}, this lade reads versions 1 and {VERSION}")
    if body["sha256"] != _checksum(body):
        raise damaged("its checksum does not match its content")
    counts = body.get("acceptance", [])
    if not isinstance(counts, list) or not all(_counted(entry) for entry in counts):
        raise damaged("acceptance must list [kind, accepted, tested] entries, a kind being [\"corpus\", integers], "
                      "with 0 <= accepted <= tested")
    vocab, requests = body["vocab_size"], body["requests"]
    if not _int(body["max_tokens"]) or body["max_tokens"] < 1 or not (vocab is None or _int(vocab) and vocab > 0):
        raise damaged("max_tokens or vocab_size is not a positive integer")
    if not isinstance(requests, list) or not all(isinstance(r, list) and all(_int(t) for t in r) for r in requests):
        raise damaged("requests must be lists of token ids")
    if any(t < 0 or vocab is not None and t >= vocab for r in requests for t in r):
        raise damaged(f"a token id lies outside the vocabulary of {vocab} (ids are 0 .. vocab_size - 1)")
    if sum(map(len, requests)) > body["max_tokens"]:
        raise damaged("it holds more tokens than its max_tokens")


def _counted(entry: object) -> bool:
    """An acceptance entry as `save` writes it: [kind, accepted, tested]."""
    if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], list) and entry[0]):
        return False
    kind, accepted, tested = entry
    return kind[0] == "corpus" and all(_int(part) for part in kind[1:]) and _int(accepted) and _int(tested) \
        and 0 <= accepted <= tested


def _int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)

