"""Running acceptance statistics of drafted tokens: for each kind of draft (the drafter and a bucket, e.g. the
length of a retrieval match or the rank of a recycled successor), how often a drafted token was accepted when it was
tested (its parent was accepted). Beta-smoothed: a prior mean and weight stand in until the sequence's own counts
outweigh them."""

from __future__ import annotations

from collections.abc import Hashable, Mapping


class AcceptanceStats:
    def __init__(self, prior: Mapping[Hashable, float], weight: float = 4.0, default: float = 0.1) -> None:
        """prior: kind -> prior acceptance rate; weight: pseudo-observations behind each prior."""
        self.prior, self.weight, self.default = prior, weight, default
        self.tested: dict[Hashable, int] = {}
        self.accepted: dict[Hashable, int] = {}

    def rate(self, kind: Hashable) -> float:
        prior = self.prior.get(kind, self.default)
        return (self.accepted.get(kind, 0) + self.weight * prior) / (self.tested.get(kind, 0) + self.weight)

    def record(self, kind: Hashable, accepted: bool) -> None:
        self.tested[kind] = self.tested.get(kind, 0) + 1
        self.accepted[kind] = self.accepted.get(kind, 0) + int(accepted)
