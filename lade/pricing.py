"""Whether drafting pays: the one rule behind every "auto" decision (the config `choose_config` picks, a batch handed
to transformers' loop, each adaptive step's size, each beam step), and its one threshold.

A planned step of R rows, each feeding q tokens (the widest row's; a share s of the steps feed one token per row),
expected to emit `accepted` tokens over all its rows, with D rows drafting, against the plain step of R rows that
emits R tokens:

    speedup = (accepted / R) * forward(R, q0) / (forward(R, q) + D * host_s + R * loop_s * L)
    drafting pays where speedup > THRESHOLD

forward(R, q): seconds of an [R, q] forward (for the mix, s * forward(R, 1) + (1 - s) * forward(R, wide));
host_s: a drafting row's work per step outside the forward; loop_s: lade's loop's work per row and step beyond
transformers' plain loop; q0: tokens per row the plain step feeds (1, or a window fed anyway); L: 1 where the plain
alternative is transformers' own loop (a whole call handed over), 0 where it is a plain step of lade's own loop.
forward, host_s and loop_s are the device's measured profile, forward at the call's context
(lade.profile.device_costs).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

THRESHOLD = 1.05  # the predicted speedup a drafting plan needs (estimates are noisy): the one threshold


@dataclass(frozen=True)
class Costs:
    """What steps cost on one device (lade.profile.device_costs measures them)."""

    forward: Callable[[int, float], float]  # (rows R, tokens per row q) -> seconds of an [R, q] forward
    host_s: float = 0.0  # a drafting row's work per step outside the forward, in seconds
    loop_s: float = 0.0  # lade's loop's work per row and step beyond transformers' plain loop, in seconds

    @classmethod
    def of_latency(cls, latency: Callable[[float], float], host_s: float = 0.0, loop_s: float = 0.0) -> "Costs":
        """Costs from a single-sequence latency model (q -> seconds): an [R, q] step costs latency(R * q)."""
        return cls(lambda rows, q: latency(rows * q), host_s, loop_s)

    def rows(self, count: int) -> Callable[[float], float]:
        """q -> seconds of a step of `count` rows feeding q tokens each."""
        return lambda q: self.forward(count, q)


@dataclass(frozen=True)
class Plan:
    """A drafting plan for one step (or a call's mean step)."""

    rows: int = 1  # R: rows fed per step
    tokens: float = 1.0  # tokens fed per row and step (the widest row's), on average over the steps
    accepted: float = 1.0  # tokens the step is expected to emit over all its rows
    single_share: float = 0.0  # s: the share of steps feeding one token per row
    drafting: int | None = None  # D: rows doing drafting work (None: every row)
    plain_tokens: float = 1.0  # q0: tokens per row of the plain step it is weighed against
    handed_over: bool = False  # L: the plain alternative is transformers' own loop (lade's loop cost counts)


def step_seconds(costs: Costs, plan: Plan) -> float:
    """The planned step's mean seconds: its forward (the mix of one-token and wide steps) and host work."""
    one = costs.forward(plan.rows, 1)
    if plan.single_share >= 1.0:
        forward = one
    else:
        wide = (plan.tokens - plan.single_share) / (1.0 - plan.single_share)  # tokens of a step that drafts
        forward = plan.single_share * one + (1.0 - plan.single_share) * costs.forward(plan.rows, wide)
    drafting = plan.rows if plan.drafting is None else plan.drafting
    return forward + drafting * costs.host_s + plan.rows * costs.loop_s * plan.handed_over


def speedup(costs: Costs, plan: Plan) -> float:
    """Predicted tokens per second of the plan over the plain step's (the module's formula)."""
    return plan.accepted / plan.rows * costs.forward(plan.rows, plan.plain_tokens) / step_seconds(costs, plan)


def pays(gain: float, threshold: float = THRESHOLD) -> bool:
    """Whether a predicted speedup (`speedup`) is worth drafting for."""
    return gain > threshold
