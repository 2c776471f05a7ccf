"""The device's measured profile for every row count: what lade.pricing prices a plan with.

A step of R rows feeding q tokens each is measured at a few row counts (PROFILE_ROWS, each cached by
lade.profile_cache.latency_profile) and interpolated linearly in R between them (extrapolated past the last with the last
segment's slope, never below it), so a batch size never measured costs no measurement of its own. Each row count's
profile is measured when a price first needs it (the one-row profile at once: the host work per step, a drafting
row's and lade's loop's, comes from it), so a model that only ever decodes one sequence measures one profile, and a
batch measures the counts around its own. `cached_rows` says which counts are priced without measuring
(lade.handover decides larger batches from them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .cost import costs_of
from .pricing import Costs
from .profile_cache import is_cached, latency_profile

PROFILE_ROWS = (1, 4, 16)  # row counts measured; every other is interpolated


class RowsLatency:
    """(rows, q) -> seconds of an [rows, q] step, from profiles at `rows` (ascending, the first one row): each a
    latency model, or a callable () -> one, called (once) when a price first needs that row count."""

    def __init__(self, rows: Sequence[int], profiles: Sequence[Callable], lazy: bool = False) -> None:
        self.rows, self._sources, self._lazy = tuple(rows), tuple(profiles), lazy
        self._loaded: dict[int, Callable[[float], float]] = {}

    def profile(self, index: int) -> Callable[[float], float]:
        """The latency model (q -> seconds) at self.rows[index], loaded (measured or read) on first use."""
        if index not in self._loaded:
            source = self._sources[index]
            self._loaded[index] = source() if self._lazy else source
        return self._loaded[index]

    def __call__(self, rows: int, q: float) -> float:
        counts = np.asarray(self.rows, dtype=float)
        top = min(int(np.searchsorted(counts, rows)), len(counts) - 1)  # the first count >= rows, else the last
        needed = range(top + 1)  # every count up to it: the interpolation's bracket, and monotone in rows
        at = np.maximum.accumulate([self.profile(i)(q) for i in needed])  # more rows never cost less
        counts = counts[: len(at)]
        if rows > counts[-1] and len(counts) > 1:
            slope = max(0.0, (at[-1] - at[-2]) / (counts[-1] - counts[-2]))
            return float(at[-1] + (rows - counts[-1]) * slope)
        return float(np.interp(rows, counts, at))


def device_costs(model, latency: Callable[[float], float] | None = None, refresh: bool = False) -> Costs:
    """What steps of any row count cost on the model's device: the latency model passed in (a single sequence's, q
    -> seconds, `lade.cost.costs_of`: an [R, q] step costs latency(R * q)), else the model's measured profiles at
    PROFILE_ROWS (each measured once when first needed, cached; refresh: measured again) with the one-row profile's
    host work."""
    if latency is not None:
        return costs_of(latency)
    one = latency_profile(model, refresh=refresh)
    loaders = [lambda: one] + [lambda rows=rows: latency_profile(model, refresh=refresh, rows=rows)
                               for rows in PROFILE_ROWS[1:]]
    return Costs(RowsLatency(PROFILE_ROWS, loaders, lazy=True), one.host_s, one.loop_s)


def cached_rows(model) -> tuple[int, ...]:
    """The PROFILE_ROWS counts, ascending, that price without measuring: every one up to the first whose profile of
    this model and device is not cached (a price at R rows reads every count up to R's bracket)."""
    cached = []
    for rows in PROFILE_ROWS:
        if not is_cached(model, rows):
            break
        cached.append(rows)
    return tuple(cached)
