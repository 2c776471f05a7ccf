"""StepCost: the expected seconds of a step's forward, from a latency model corrected by the call's timed steps."""

from __future__ import annotations

import math
from collections.abc import Callable


class StepCost:
    """Expected seconds of a forward feeding `q` tokens in all (a batch of B rows padded to Q tokens each feeds
    B * Q): the latency model (the device's measured profile, or any q -> seconds callable passed in), corrected by
    the steps this call ran (a profile is timed for one sequence at one context length and one machine state). Per
    size class of step (q in [2^k, 2^(k+1))) it keeps a running log-ratio of observed to modelled time; a class not
    yet observed borrows the nearest observed one's. host_s: a drafting row's work outside the forward, in seconds."""

    def __init__(self, latency: Callable[[float], float], host_s: float, alpha: float = 0.2) -> None:
        self.latency, self.host_s, self.alpha = latency, host_s, alpha
        self.log_ratio: dict[int, float] = {}

    def _correction(self, q: int) -> float:
        if not self.log_ratio:
            return 1.0
        size = q.bit_length()
        return math.exp(self.log_ratio[min(self.log_ratio, key=lambda k: (abs(k - size), k))])

    def forward_s(self, q: int) -> float:
        return self.latency(q) * self._correction(q)

    def observe(self, q: int, seconds: float) -> None:
        size, value = q.bit_length(), math.log(max(seconds, 1e-9) / self.latency(q))
        old = self.log_ratio.get(size)
        self.log_ratio[size] = value if old is None else (1 - self.alpha) * old + self.alpha * value
