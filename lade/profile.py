"""The device's measured profile for every row count: what lade.pricing prices a plan with.

A step of R rows feeding q tokens each is measured at a few row counts (PROFILE_ROWS, each cached by
lade.cost.latency_profile) and interpolated linearly in R between them (extrapolated past the last with the last
segment's slope, never below it), so the first call at a batch size never measured costs no measurement: once a
model has been profiled on a device, every batch size is priced from the cache. The host work per step (a drafting
row's and lade's loop's) comes from the one-row profile.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .cost import LatencyProfile, costs_of, latency_profile
from .pricing import Costs

PROFILE_ROWS = (1, 4, 16)  # row counts measured; every other is interpolated


class RowsLatency:
    """(rows, q) -> seconds of an [rows, q] step, from profiles measured at `rows` (ascending, the first one row)."""

    def __init__(self, rows: Sequence[int], profiles: Sequence[Callable[[float], float]]) -> None:
        self.rows, self.profiles = tuple(rows), tuple(profiles)

    def __call__(self, rows: int, q: float) -> float:
        at = np.asarray([profile(q) for profile in self.profiles])  # [len(self.rows)] seconds at each row count
        counts = np.asarray(self.rows, dtype=float)
        if rows > counts[-1] and len(counts) > 1:
            slope = max(0.0, (at[-1] - at[-2]) / (counts[-1] - counts[-2]))
            return float(at[-1] + (rows - counts[-1]) * slope)
        return float(np.interp(rows, counts, np.maximum.accumulate(at)))  # more rows never cost less


def device_costs(model, latency: Callable[[float], float] | None = None, refresh: bool = False) -> Costs:
    """What steps of any row count cost on the model's device: the latency model passed in (a single sequence's, q
    -> seconds, `lade.cost.costs_of`: an [R, q] step costs latency(R * q)), else the model's measured profiles at
    PROFILE_ROWS (measured once, cached; refresh: measured again) with the one-row profile's host work."""
    if latency is not None:
        return costs_of(latency)
    profiles: list[LatencyProfile] = [latency_profile(model, refresh=refresh, rows=rows) for rows in PROFILE_ROWS]
    return Costs(RowsLatency(PROFILE_ROWS, profiles), profiles[0].host_s, profiles[0].loop_s)
