"""The kinds of drafted tokens the planning drafter keeps acceptance rates for: the drafter that proposed a token
and a bucket of what made it likely (a retrieval match's length, a recycled successor's rank), then its depth."""

from __future__ import annotations

from .acceptance_prior import PRIOR
from .planner import Kind

MATCH_BUCKETS = (1, 2, 4, 8, 16)  # a match of length m falls in the first bucket >= m (longer: the last + 1)


def match_bucket(length: int) -> int:
    return next((i for i, top in enumerate(MATCH_BUCKETS) if length <= top), len(MATCH_BUCKETS))


def retrieval_kind(match: int, depth: int) -> Kind:
    """A retrieved token `depth` tokens into a continuation whose match had length `match`: once its parent is
    accepted, the copy has matched match + depth tokens."""
    return ("retrieval", match_bucket(match + depth), min(depth, 1))


def recycling_kind(rank: int, depth: int) -> Kind:
    return ("recycling", rank, min(depth, 2))


def pool_kind(depth: int) -> Kind:
    return ("pool", min(depth, 2))


def kind_group(kind: Kind) -> Kind:
    """The drafter and depth bucket of a kind (every kind ends with its depth bucket)."""
    return kind[0], kind[-1]


def prior_rates() -> dict[Kind, float]:
    """Acceptance rates standing in until a sequence has its own counts (measured: see acceptance_prior.py)."""
    return {kind: rate for kind, (rate, _) in PRIOR.items()}
