"""The kinds of drafted tokens the planning drafter keeps acceptance rates for: the drafter that proposed a token
and a bucket of what made it likely (a retrieval match's length, a recycled successor's rank, a corpus continuation's
match length and share), then its depth."""

from __future__ import annotations

from collections.abc import Hashable, Mapping

from .acceptance_prior import PRIOR

Kind = Hashable
AGREED = "agreed"

MATCH_BUCKETS = (1, 2, 4, 8, 16)  # a match of length m falls in the first bucket >= m (longer: the last + 1)
SHARE_BUCKETS = (0.25, 0.5, 0.75, 0.99, 1.0)  # a corpus share s falls in the first bucket >= s
SHARE_RATES = (0.15, 0.4, 0.65, 0.85, 1.0)  # each share bucket's typical share
CORPUS_PRIOR_WEIGHT = 8  # tests a corpus kind's own counts need to weigh as much as its prior


def match_bucket(length: int) -> int:
    return next((i for i, top in enumerate(MATCH_BUCKETS) if length <= top), len(MATCH_BUCKETS))


def retrieval_kind(match: int, depth: int) -> Kind:
    """A retrieved token `depth` tokens into a continuation whose match had length `match`: once its parent is
    accepted, the copy has matched match + depth tokens."""
    return ("retrieval", match_bucket(match + depth), min(depth, 1))


def recycling_kind(rank: int, depth: int) -> Kind:
    return ("recycling", rank, min(depth, 2))


def corpus_kind(match: int, share: float, depth: int) -> Kind:
    """A corpus token `depth` tokens into a continuation whose match had length `match`, `share` of the stored
    occurrences continuing its parent's path with it (lade/corpus.py)."""
    return ("corpus", match_bucket(match + depth), next(i for i, top in enumerate(SHARE_BUCKETS) if share <= top),
            min(depth, 1))


def pool_kind(depth: int) -> Kind:
    return ("pool", min(depth, 2))


def agreement(kind: Kind) -> Kind:
    """The kind of a token proposed by `kind` (the likeliest of its proposers) and others alike."""
    return (AGREED, *kind) if isinstance(kind, tuple) else (AGREED, kind)


def agreed_member(kind: Kind) -> Kind | None:
    """The likeliest proposer of an agreement kind (None for any other kind)."""
    if not (isinstance(kind, tuple) and kind and kind[0] == AGREED):
        return None
    return kind[1:] if len(kind) > 2 else kind[1]


def kind_group(kind: Kind) -> Kind:
    """The drafter and depth bucket of a kind (every kind ends with its depth bucket)."""
    return kind[0], kind[-1]


def prior_rates(corpus: Mapping[Kind, tuple[int, int]] | None = None) -> dict[Kind, float]:
    """Acceptance rates standing in until a sequence has its own counts (measured: see acceptance_prior.py).
    corpus: a corpus's counts of its own drafts, kind -> (accepted, tested) (lade.Corpus.acceptance), which move
    its kinds' rates from the prior toward what it measured."""
    rates = {kind: rate for kind, (rate, _) in PRIOR.items()}
    learned = _corpus_prior(rates)
    for kind, (accepted, tested) in (corpus or {}).items():
        prior = learned.get(kind, 0.1)
        learned[kind] = (accepted + CORPUS_PRIOR_WEIGHT * prior) / (tested + CORPUS_PRIOR_WEIGHT)
    return rates | learned


def _corpus_prior(rates: dict[Kind, float]) -> dict[Kind, float]:
    """A corpus continuation is a retrieval match found in earlier requests: its prior is a retrieval match's of the
    same length (the likeliest depth; the nearest shorter length where none was measured), times its share."""
    match_rates: list[float] = []
    for bucket in range(len(MATCH_BUCKETS) + 1):
        measured = [rate for kind, rate in rates.items() if kind[:2] == ("retrieval", bucket)]
        match_rates.append(max(measured) if measured else match_rates[-1] if match_rates else 0.1)
    return {("corpus", bucket, share, depth): match_rates[bucket] * SHARE_RATES[share]
            for bucket in range(len(MATCH_BUCKETS) + 1) for share in range(len(SHARE_BUCKETS)) for depth in (0, 1)}
