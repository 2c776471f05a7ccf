"""The device's measured profile for every row count: what lade.pricing prices a plan with.

A step of R rows feeding q tokens each is measured at a few row counts (PROFILE_ROWS, each cached by
lade.profile_cache) and interpolated linearly in R between them (extrapolated past the last with the last segment's
slope, never below it), so a batch size never measured costs no measurement of its own. Each row count's profile is
measured when a price first needs it (the one-row profile at once: the host work per step, a drafting row's and
lade's loop's, comes from it), so a model that only ever decodes one sequence measures one profile, and a batch
measures the counts around its own. `cached_rows` says which counts are priced without measuring (lade.handover
decides larger batches from them).

The profiles are measured at one context (lade.cost.CONTEXT cached tokens); a call whose mean context is past
STRETCH times that is priced at its own (`ContextLatency`), with a second one-row profile at lade.cost.LONG_CONTEXT,
measured when such a call first needs it and cached like the others.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .cost import LONG_CONTEXT, LONG_QS, LatencyProfile, costs_of, measurement_shape, rising
from .pricing import Costs
from .profile_cache import is_cached, latency_profile

PROFILE_ROWS = (1, 4, 16)  # row counts measured; every other is interpolated
STRETCH = 2  # a call whose mean context is past STRETCH x the measured one is priced at its own context


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


class ContextLatency:
    """(rows, q) -> seconds of an [rows, q] step with `context` cached tokens per row: `base` (steps at the short
    profile's context c0) plus, for each row, the extra seconds the long profile (one row, at c1 > c0) times over the
    short one, linear in context (interpolated between c0 and c1, extrapolated past c1 with the same slope):

        forward(R, q, c) = base(R, q) + R * (c - c0) / (c1 - c0) * (long(q) - short(q))

    (each row's attention reads its own context; the extra is made non-negative and non-decreasing in q, as the
    profiles are). `long` is a callable () -> the long profile, called (once) when a price first needs it."""

    def __init__(self, base: Callable[[int, float], float], short: LatencyProfile,
                 long: Callable[[], LatencyProfile], context: float) -> None:
        self.base, self.short, self._long, self.context = base, short, long, context
        self._extra: tuple[tuple[int, ...], tuple[float, ...], float] | None = None

    def extra(self, q: float) -> float:
        """One row's extra seconds at `context` for a q-token step."""
        if self._extra is None:
            long = self._long()
            differences = tuple(max(0.0, long(k) - self.short(k)) for k in long.qs)
            span = long.context - self.short.context  # > 0 where device_costs prices at a context (else no extra)
            scale = (self.context - self.short.context) / span if span > 0 else 0.0
            self._extra = long.qs, differences, scale
        qs, differences, scale = self._extra
        return scale * rising(qs, differences, q)

    def __call__(self, rows: int, q: float) -> float:
        return self.base(rows, q) + rows * self.extra(q)


def call_context(prompt: int, max_length: int | None) -> float:
    """The mean context of a call's steps: its prompt plus half its new tokens (max_length: prompt + new tokens)."""
    return (prompt + max_length) / 2 if max_length is not None and max_length > prompt else float(prompt)


def device_costs(model, latency: Callable[[float], float] | None = None, refresh: bool = False,
                 context: float | None = None) -> Costs:
    """What steps of any row count cost on the model's device: the latency model passed in (a single sequence's, q
    -> seconds, `lade.cost.costs_of`: an [R, q] step costs latency(R * q), priced as given at any context), else the
    model's measured profiles at PROFILE_ROWS (each measured once when first needed, cached; refresh: measured
    again) with the one-row profile's host work. context: cached tokens per row of the priced steps (`call_context`);
    past STRETCH x the profiles' context (and where the model can hold a longer measurement) the steps are priced at
    it (`ContextLatency`), else at the profiles' context."""
    if latency is not None:
        return costs_of(latency)
    one = latency_profile(model, refresh=refresh)
    loaders = [lambda: one] + [lambda rows=rows: latency_profile(model, refresh=refresh, rows=rows)
                               for rows in PROFILE_ROWS[1:]]
    forward = RowsLatency(PROFILE_ROWS, loaders, lazy=True)
    if context is not None and context > STRETCH * one.context and \
            measurement_shape(model, LONG_QS, LONG_CONTEXT)[1] > one.context:
        forward = ContextLatency(forward, one, lambda: latency_profile(model, refresh=refresh, long=True), context)
    return Costs(forward, one.host_s, one.loop_s)


def cached_rows(model) -> tuple[int, ...]:
    """The PROFILE_ROWS counts, ascending, that price without measuring: every one up to the first whose profile of
    this model and device is not cached (a price at R rows reads every count up to R's bracket)."""
    cached = []
    for rows in PROFILE_ROWS:
        if not is_cached(model, rows):
            break
        cached.append(rows)
    return tuple(cached)
