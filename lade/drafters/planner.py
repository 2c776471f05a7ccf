"""Planning one step's candidate tree from several drafters: best-first by estimated acceptance, cut where the
expected tokens per second peak.

Every drafted node carries the probability that it is accepted given that its parent is (its kind's running
acceptance rate, lade.drafters.acceptance, discounted by the chance that a likelier sibling was the right one). A node
has one kind: its proposer's, or where several proposed the same token, the agreement of the likeliest with others
(`agreement`), with rates of its own: agreement is evidence, and crediting each proposer with the outcomes of agreed
tokens would inflate the rates of the ones that are weak alone (a recycled successor is accepted far more often where
a retrieval match proposes it too). The
probability that the whole path to it is accepted is the product along the path, so it never grows down a path,
and taking nodes in decreasing path probability always yields a tree. A step feeding m nodes is expected to emit
1 + (sum of their values: path probabilities, calibrated) tokens (the model's own next token always comes). A fixed
budget feeds every node up to it; adaptive steps feed the nodes that pay for the step: in a batch,
lade.drafters.allocation weighs every row's nodes against the cost of the whole batch's step, and with cost(m) given
here (the seconds of a step feeding m nodes) the same rule cuts one tree, at the m that maximises expected tokens /
cost(m), m = 0 being a plain step.
"""

from __future__ import annotations

import functools
import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .acceptance import AcceptanceStats
from .acceptance_prior import CALIBRATION
from .allocation import allocate
from .kinds import Kind, agreement
from .recycling import AdjacencyTable


@dataclass
class Lead:
    """A drafter's guess of the tokens after some node: `tokens` in order, each of kind kinds[i]."""

    tokens: tuple[int, ...]
    kinds: tuple[Kind, ...]


@dataclass
class PlannedNode:
    path: tuple[int, ...]  # tokens from the root's child down to this node
    kind: Kind  # whose acceptance rate it was planned with, and whose counts its outcome goes to
    path_probability: float

    def accepted_in(self, accepted: Sequence[int]) -> bool:
        """Whether a step that accepted `accepted` accepted the whole path to this node."""
        return tuple(accepted[: len(self.path)]) == self.path


@dataclass
class Plan:
    nodes: list[PlannedNode] = field(default_factory=list)  # in the order taken (parents first)
    odds: float = CALIBRATION  # the odds factor of its values (`calibrated`)

    @property
    def candidates(self) -> list[tuple[int, ...]]:
        """Leaf paths, parents before children: what TokenTree merges back into this tree."""
        inner = {node.path[:-1] for node in self.nodes}
        return [node.path for node in self.nodes if node.path not in inner]

    @property
    def values(self) -> list[float]:
        """Each node's expected contribution to a step's tokens, in the order taken: its path probability, calibrated.
        The product of per-node rates treats the acceptances along a path as independent; along a copy they are
        positively correlated, so more tokens are accepted than the products add up to, most of all deep in a path.
        `calibrated` multiplies a path's odds by CALIBRATION, fitted on the prior's run (acceptance_prior.py), and by
        the sequence's own accepted over expected paths so far (AcceptanceStats.path_factor)."""
        return [calibrated(node.path_probability, self.odds) for node in self.nodes]

    def record(self, accepted: Sequence[int], stats: AcceptanceStats) -> None:
        """Each node whose parent was accepted was tested: accepted iff its token is the next accepted token; each
        node's value is counted against whether its whole path was accepted."""
        for node, value in zip(self.nodes, self.values):
            stats.record_path(value, node.accepted_in(accepted))
            depth = len(node.path) - 1
            if tuple(accepted[:depth]) == node.path[:-1] and depth < len(accepted):
                stats.record(node.kind, accepted[depth] == node.path[-1])


def plan_tree(root: int, leads: Sequence[Lead], table: AdjacencyTable | None,
              recycling_kind: Callable[[int, int], Kind], stats: AcceptanceStats, budget: int,
              cost: Callable[[int], float] | None, margin: float = 1.0) -> Plan:
    """Best-first tree over the leads (continuations of the root) and, with a table, the recycled successors of every
    node (recycling_kind(rank, depth) names their kind). cost: m -> seconds of a step feeding m nodes (None: take all
    up to `budget`); a drafting step must beat the plain step's expected tokens per second by `margin`."""
    counter = 0
    heap: list[tuple[float, int, tuple[int, ...], Kind, list[Lead]]] = []
    rate = functools.cache(stats.rate)  # the rates do not change while one tree is planned

    def push_children(path: tuple[int, ...], probability: float, last: int, leads: Sequence[Lead]) -> None:
        nonlocal counter
        proposed: dict[int, tuple[set[Kind], list[Lead]]] = {}  # token -> (its proposers' kinds, their rests)
        for lead in leads:
            kinds, rest = proposed.setdefault(lead.tokens[0], (set(), []))
            kinds.add(lead.kinds[0])
            if len(lead.tokens) > 1:
                rest.append(Lead(lead.tokens[1:], lead.kinds[1:]))
        if table is not None:
            for rank, token in enumerate(table.row(last)):
                proposed.setdefault(token, (set(), []))[0].add(recycling_kind(rank, len(path)))
        children = [(token, *node_kind(kinds, rate), rest) for token, (kinds, rest) in proposed.items()]
        missed = 1.0  # at most one child is accepted: a child counts only where its likelier siblings were wrong
        for token, kind, p, rest in sorted(children, key=lambda child: -child[2]):
            counter += 1
            heapq.heappush(heap, (-probability * p * missed, counter, path + (token,), kind, rest))
            missed *= 1.0 - p

    push_children((), 1.0, root, leads)
    plan = Plan(odds=CALIBRATION * stats.path_factor())
    while heap and len(plan.nodes) < budget:
        negative, _, path, kind, rest = heapq.heappop(heap)
        plan.nodes.append(PlannedNode(path, kind, -negative))
        push_children(path, -negative, path[-1], rest)
    if cost is not None:
        plan.nodes = plan.nodes[: allocate([plan.values], [0], cost, margin=margin)[0]]
    return plan


def calibrated(probability: float, odds: float) -> float:
    """`probability` with its odds multiplied by `odds`."""
    return odds * probability / (1.0 + (odds - 1.0) * probability)


def node_kind(kinds: set[Kind], rate: Callable[[Kind], float]) -> tuple[Kind, float]:
    """(kind, acceptance rate) of a token proposed by `kinds`: the proposer's own where there is one, else the
    agreement of the likeliest with the others."""
    if len(kinds) == 1:
        (kind,) = kinds
        return kind, rate(kind)
    kind = agreement(max(kinds, key=lambda kind: (rate(kind), repr(kind))))  # repr: the same choice in every run
    return kind, rate(kind)
