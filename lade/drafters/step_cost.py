"""StepCost: the expected seconds of a drafting step, from a latency model corrected by the sequence's timed steps."""

from __future__ import annotations

import math
from collections.abc import Callable


class StepCost:
    """Expected seconds of a step feeding `m` draft nodes (besides the last token and the window): the latency model
    (the device's measured profile, or any q -> seconds callable passed in), corrected by the steps this sequence ran
    (a profile is timed at one context length and one machine state). Per size class of step (q in [2^k, 2^(k+1)))
    it keeps a running log-ratio of observed to modelled time; a class not yet observed borrows the nearest
    observed one's."""

    def __init__(self, latency: Callable[[float], float], window_tokens: int, host_s: float,
                 alpha: float = 0.2) -> None:
        self.latency, self.window, self.host_s, self.alpha = latency, window_tokens, host_s, alpha
        self.log_ratio: dict[int, float] = {}

    def _correction(self, q: int) -> float:
        if not self.log_ratio:
            return 1.0
        size = q.bit_length()
        return math.exp(self.log_ratio[min(self.log_ratio, key=lambda k: (abs(k - size), k))])

    def __call__(self, m: int) -> float:
        q = 1 + self.window + m
        return self.latency(q) * self._correction(q) + (self.host_s if m else 0.0)

    def observe(self, q: int, seconds: float) -> None:
        size, value = q.bit_length(), math.log(max(seconds, 1e-9) / self.latency(q))
        old = self.log_ratio.get(size)
        self.log_ratio[size] = value if old is None else (1 - self.alpha) * old + self.alpha * value
