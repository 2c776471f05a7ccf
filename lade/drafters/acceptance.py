"""Running acceptance statistics of drafted tokens: for each kind of draft (the drafter and a bucket, e.g. the
length of a retrieval match or the rank of a recycled successor), how often a drafted token was accepted when it was
tested (its parent was accepted). Beta-smoothed: a prior mean and weight stand in until the sequence's own counts
outweigh them.

Kinds can be grouped (e.g. every recycled successor at one depth, whatever its rank): a rare kind is tested too
seldom for its own counts to correct a prior measured on other text, so its rate is also scaled by its group's
realised over expected acceptances on this sequence (a hierarchical correction, smoothed toward 1)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping

from .kinds import agreed_member


class AcceptanceStats:
    def __init__(self, prior: Mapping[Hashable, float], weight: float = 4.0, default: float = 0.1,
                 group: Callable[[Hashable], Hashable] | None = None, group_weight: float = 4.0) -> None:
        """prior: kind -> prior acceptance rate; weight: pseudo-observations behind each prior; group: kind -> its
        group (None: no group correction); group_weight: expected acceptances behind a group's neutral factor."""
        self.prior, self.weight, self.default = prior, weight, default
        self.group, self.group_weight = group, group_weight
        self.tested: dict[Hashable, int] = {}
        self.accepted: dict[Hashable, int] = {}
        self.group_expected: dict[Hashable, float] = {}
        self.group_accepted: dict[Hashable, int] = {}
        self.paths_expected, self.paths_accepted = 0.0, 0

    def prior_mean(self, kind: Hashable) -> float:
        """The prior's rate of `kind`; for an agreement without one, its likeliest proposer's current rate (agreeing
        drafters are at least as good as the best of them); else `default`."""
        if kind in self.prior:
            return self.prior[kind]
        member = agreed_member(kind)
        return self.default if member is None else self.rate(member)

    def _own_rate(self, kind: Hashable) -> float:
        prior = self.prior_mean(kind)
        return (self.accepted.get(kind, 0) + self.weight * prior) / (self.tested.get(kind, 0) + self.weight)

    def group_factor(self, kind: Hashable) -> float:
        if self.group is None:
            return 1.0
        g = self.group(kind)
        return (self.group_accepted.get(g, 0) + self.group_weight) / (self.group_expected.get(g, 0.0) +
                                                                       self.group_weight)

    def rate(self, kind: Hashable) -> float:
        return min(1.0, self._own_rate(kind) * self.group_factor(kind))

    def record(self, kind: Hashable, accepted: bool) -> None:
        if self.group is not None:
            g = self.group(kind)
            self.group_expected[g] = self.group_expected.get(g, 0.0) + self._own_rate(kind)
            self.group_accepted[g] = self.group_accepted.get(g, 0) + int(accepted)
        self.tested[kind] = self.tested.get(kind, 0) + 1
        self.accepted[kind] = self.accepted.get(kind, 0) + int(accepted)

    def record_path(self, value: float, accepted: bool) -> None:
        """A fed node's value (the path's expected acceptance) and whether its whole path was accepted."""
        self.paths_expected += value
        self.paths_accepted += int(accepted)

    def path_factor(self) -> float:
        """This sequence's accepted over expected paths, smoothed toward 1 by `group_weight` expected paths."""
        return (self.paths_accepted + self.group_weight) / (self.paths_expected + self.group_weight)
