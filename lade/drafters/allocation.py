"""How many draft nodes each row of a batch feeds in one step: the one sizing rule of adaptive drafts (a single
sequence is a batch of one).

The B rows of a step are fed in one forward of [B, Q] tokens, Q the widest row's (narrower rows are padded,
lade.layout.stack_layouts), so the step costs forward(B * Q) seconds (the latency model at the batch's total width)
plus host_s for each row that drafts. Each row offers its draft nodes ranked best first, each with the expected
tokens it adds to the step (its path probability: lade.drafters.planner); the step is expected to emit B tokens plus
the values of the nodes it feeds. The rule takes nodes across rows in decreasing value (so a row feeds the nodes
worth at least a common threshold, and rows draft different amounts) and keeps the prefix where the batch's
expected tokens per second peak, priced by lade.pricing against the plain batched step; where that prefix does not
pay (lade.pricing.pays), every row feeds its last token alone.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..pricing import THRESHOLD, Costs, Plan, pays, speedup
from .base import Draft, Offer
from .step_cost import StepCost

MAX_REST = 8  # most steps a batch feeds no draft node, without planning one, after steps whose plans fed none


def allocate(values: Sequence[Sequence[float]], fixed: Sequence[int], forward: Callable[[int], float],
             host_s: float = 0.0, margin: float = THRESHOLD) -> list[int]:
    """values[b]: row b's node values, best first; fixed[b]: tokens row b feeds besides draft nodes; forward(Q):
    seconds of the step whose widest row feeds Q tokens -> draft nodes per row: the prefix of the nodes in decreasing
    value with the highest lade.pricing.speedup of (B + values taken) tokens in forward(widest) + host_s per drafting
    row, against the plain step feeding max(fixed); none unless it pays at `margin` (ties keep the smaller step)."""
    order = sorted(((value, b) for b, row in enumerate(values) for value in row), key=lambda item: -item[0])
    seconds: dict[int, float] = {}

    def step(rows: int, width: float) -> float:
        if width not in seconds:
            seconds[width] = forward(int(width))
        return seconds[width]

    costs, plain = Costs(step, host_s), max(fixed)
    counts, widest, drafting, expected = [0] * len(values), plain, 0, float(len(values))
    best, taken = 0.0, 0
    for n, (value, b) in enumerate(order, 1):
        drafting += counts[b] == 0
        counts[b] += 1
        widest = max(widest, fixed[b] + counts[b])
        expected += value
        gain = speedup(costs, Plan(len(values), widest, expected, drafting=drafting, plain_tokens=plain))
        if gain > best:
            best, taken = gain, n
    if not pays(best, margin):
        taken = 0
    chosen = [0] * len(values)
    for _, b in order[:taken]:
        chosen[b] += 1
    return chosen


class StepSizer:
    """Sizes every step of one generate call (`allocate` over the active rows' offers) with the call's StepCost, and
    corrects that cost by each step's timed forward at the batch's total width.

    Planning costs host time whether or not the step then drafts, B trees for B rows, so after k planned steps in a
    row that fed no draft node a batch of several rows rests for min(2^(k-1), MAX_REST) steps: every row feeds its
    last token (and window) without planning (`plans`); the first planned step that drafts ends the back-off. One
    sequence never rests: its nodes cost almost nothing, and a step that drafts nothing is often followed by one with
    a long match."""

    def __init__(self, cost: StepCost, correct: bool = True, margin: float = THRESHOLD) -> None:
        self.cost, self.correct, self.margin = cost, correct, margin
        self.idle = 0  # planned steps in a row that fed no draft node
        self.resting = 0  # steps left before the next planned one

    def plans(self) -> bool:
        """Whether this step plans its drafts (False: a resting step, every row feeding no draft node)."""
        if self.resting:
            self.resting -= 1
            return False
        return True

    def drafts(self, offers: Sequence[Offer]) -> list[Draft]:
        """Each row's Draft, cut where the batch's step pays most."""
        rows = len(offers)
        counts = allocate([offer.values for offer in offers], [offer.fixed for offer in offers],
                          lambda width: self.cost.forward_s(rows * width), self.cost.host_s, self.margin)
        self.idle = 0 if any(counts) else self.idle + 1
        self.resting = min(2 ** (self.idle - 1), MAX_REST) if self.idle and rows > 1 else 0
        return [offer.take(k) for offer, k in zip(offers, counts)]

    def observe(self, tokens: int, seconds: float) -> None:
        """tokens: what the step fed in all (B * Q, padding included); seconds: its forward's time."""
        if self.correct:
            self.cost.observe(tokens, seconds)
