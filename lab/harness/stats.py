"""The one definition of compression and speedup in the research harness, with 95% bootstrap intervals over
prompts (scipy.stats.bootstrap).

- compression = new tokens / forward passes, token-weighted over prompts: sum(new_tokens) / sum(forward_calls)
  (the paper's step compression; a prompt that generates more tokens counts more).
- speedup = throughput ratio of total times: (sum(new_tokens) / sum(wall_s)) of the method over the same of the
  reference (plain greedy), both run on the same prompts in the same process, interleaved (lab.harness.bench). With
  lossless decoding both generate the same tokens, so this is sum(reference wall_s) / sum(method wall_s).
- Timing noise: a benchmark times each prompt `repeats` times (lab.harness.bench), a row's time is the MEDIAN over
  its repeats (`median_repeat`), and the A/A row (`aa_row`, named `aa_name(reference)`: the reference's first
  repeat against its second, per prompt) is summarized like any method, so each speedup stands beside the ratio
  that noise alone gives.
- Intervals: percentile bootstrap resampling prompts (pairs of reference and method rows stay together; BCa was
  unstable at a few prompts); fewer than MIN_INTERVAL_N prompts give no interval (NaN): show the points instead
  (`interval_or_points`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

CONFIDENCE = 0.95
Z95 = float(stats.norm.ppf(0.5 + CONFIDENCE / 2))  # a normal 95% interval is the mean +- Z95 standard deviations
RESAMPLES = 2000
SEED = 0
KEYS = ("prompt_set", "method")  # one summary row per key
MIN_INTERVAL_N = 5  # fewer prompts (or batches) than this: no interval, the points are shown instead
AA_SUFFIX = " (A/A)"  # the method name of the reference against itself: aa_name("greedy") == "greedy (A/A)"


def aa_name(reference: str) -> str:
    """The A/A row's method name for `reference` (its own repeats against each other)."""
    return reference + AA_SUFFIX


def is_aa(method: str) -> bool:
    """Whether `method` names an A/A row (aa_name)."""
    return method.endswith(AA_SUFFIX)


def median_repeat(values: Sequence[float]) -> int:
    """Index of a prompt's median repeat (the lower median for an even count): the row takes its times, so one run
    disturbed by the machine does not move them and its wall and forward times stay one run's."""
    if not len(values):
        raise ValueError("median_repeat needs at least one repeat")
    return int(np.argsort(np.asarray(values, dtype=float), kind="stable")[(len(values) - 1) // 2])


def aa_row(reference: dict[str, Any], second_forward_s: float | None = None) -> dict[str, Any]:
    """The A/A row of a reference row timed two or more times (`wall_s_repeats`, in run order): the reference row
    renamed (aa_name), its `wall_s` the second repeat and `reference_wall_s` the first, so its speedup (first /
    second) is what timing noise alone gives; its other columns stay the reference row's.

    second_forward_s: the second repeat's seconds inside the model forward, for rows that record it (`forward_s`,
    `host_share` then describe the second repeat); None for rows without forward time (they get no such columns).
    """
    walls = reference["wall_s_repeats"]
    if len(walls) < 2:
        raise ValueError(f"an A/A row needs two or more repeats of {reference['method']!r}, got {len(walls)}")
    first, second = walls[:2]
    row = reference | {"method": aa_name(reference["method"]), "wall_s": second, "reference_wall_s": first,
                       "tokens_per_s": reference["new_tokens"] / second, "speedup": first / second}
    if second_forward_s is not None:
        row |= {"forward_s": second_forward_s, "host_share": max(0.0, 1.0 - second_forward_s / second)}
    return row


def ratio_of_sums(numerator, denominator, axis: int = -1):
    """sum(numerator) / sum(denominator) along `axis` (paired arrays, e.g. per-batch priced times)."""
    return np.sum(numerator, axis=axis) / np.sum(denominator, axis=axis)


def compression(new_tokens, forward_calls, axis: int = -1):
    """sum(new_tokens) / sum(forward_calls) along `axis` (arrays of per-prompt counts)."""
    return ratio_of_sums(new_tokens, forward_calls, axis)


def speedup(ref_tokens, ref_wall, tokens, wall, axis: int = -1):
    """(sum(tokens) / sum(wall)) / (sum(ref_tokens) / sum(ref_wall)) along `axis` (paired per-prompt arrays)."""
    return (np.sum(tokens, axis=axis) / np.sum(wall, axis=axis)) / (
        np.sum(ref_tokens, axis=axis) / np.sum(ref_wall, axis=axis))


def interval(statistic: Callable[..., np.ndarray], samples: Sequence[np.ndarray], confidence: float = CONFIDENCE,
             n_resamples: int = RESAMPLES, seed: int = SEED) -> tuple[float, float]:
    """Percentile bootstrap interval of `statistic(*samples, axis=-1)` resampling the paired samples' common index.

    samples: equal-length 1-D arrays, element i of each belonging to prompt i. Returns (low, high); (nan, nan)
    for fewer than MIN_INTERVAL_N prompts (show the points: `interval_or_points`); (value, value) when every
    resample gives the same value.
    """
    arrays = [np.asarray(s, dtype=float) for s in samples]
    if len({a.shape for a in arrays}) != 1 or arrays[0].ndim != 1:
        raise ValueError(f"samples must be 1-D arrays of one length, got shapes {[a.shape for a in arrays]}")
    if len(arrays[0]) < MIN_INTERVAL_N:
        return float("nan"), float("nan")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a degenerate distribution is handled below
        result = stats.bootstrap(arrays, statistic, method="percentile", paired=True, vectorized=True,
                                 confidence_level=confidence, n_resamples=n_resamples,
                                 random_state=np.random.default_rng(seed))
    low, high = result.confidence_interval
    if not (np.isfinite(low) and np.isfinite(high)):  # every resample equal (e.g. identical prompts)
        value = float(statistic(*arrays, axis=-1))
        return value, value
    return float(low), float(high)


@dataclass(frozen=True)
class IntervalOrPoints:
    """A summary of per-prompt values: the estimate with its interval for MIN_INTERVAL_N or more values, else the
    values themselves (an interval from fewer would be unstable)."""

    n: int
    estimate: float
    low: float | None  # None below MIN_INTERVAL_N
    high: float | None
    points: tuple[float, ...]  # every value, in order (always kept; shown instead of the interval below the minimum)

    @property
    def has_interval(self) -> bool:
        return self.low is not None

    def text(self, fmt: str = "{:.2f}") -> str:
        """'1.23 [1.10, 1.40] (n = 10)' or, below the minimum, '1.23 (n = 2: 1.10, 1.36)'."""
        value = fmt.format(self.estimate)
        if self.has_interval:
            return f"{value} [{fmt.format(self.low)}, {fmt.format(self.high)}] (n = {self.n})"
        return f"{value} (n = {self.n}: {', '.join(fmt.format(p) for p in self.points)})"


def interval_or_points(values: Sequence[float], statistic: Callable[..., np.ndarray] = np.median,
                       confidence: float = CONFIDENCE) -> IntervalOrPoints:
    """`statistic` (default the median) of per-prompt `values` (e.g. speedups) with its percentile bootstrap
    interval over prompts when there are MIN_INTERVAL_N or more, else with the points only."""
    arr = np.asarray(values, dtype=float)
    if arr.ndim != 1 or not len(arr):
        raise ValueError(f"values must be a non-empty 1-D sequence, got shape {arr.shape}")
    estimate = float(statistic(arr, axis=-1))
    if len(arr) < MIN_INTERVAL_N:
        return IntervalOrPoints(len(arr), estimate, None, None, tuple(map(float, arr)))
    low, high = interval(statistic, (arr,), confidence)
    return IntervalOrPoints(len(arr), estimate, low, high, tuple(map(float, arr)))


def _paired(df: pd.DataFrame, reference: str, keys: Sequence[str]) -> pd.DataFrame:
    """Each non-reference row with its prompt's reference row (columns suffixed `_ref`); a row with a
    `reference_wall_s` (the A/A row) is paired with that time instead of the reference row's."""
    ref_keys = [k for k in keys if k != "method"] + ["prompt_id"]
    ref = df[df["method"] == reference][ref_keys + ["new_tokens", "wall_s"]]
    if ref.duplicated(ref_keys).any():
        raise ValueError(f"more than one {reference!r} row for a prompt: {ref[ref.duplicated(ref_keys)].head()}")
    merged = df.merge(ref, on=ref_keys, how="left", suffixes=("", "_ref"))
    if "reference_wall_s" in merged:  # an A/A row: the reference's other repeat, not its median
        own = pd.to_numeric(merged["reference_wall_s"], errors="coerce")
        merged["wall_s_ref"] = own.where(own.notna(), merged["wall_s_ref"])
    missing = merged["wall_s_ref"].isna()
    if missing.any():
        raise ValueError(f"no {reference!r} row for {merged.loc[missing, ref_keys].drop_duplicates().values.tolist()}"
                         ": speedups are measured against the reference run on the same prompt")
    return merged


def summarize_runs(df: pd.DataFrame, reference: str = "greedy", keys: Sequence[str] = KEYS,
                   confidence: float = CONFIDENCE) -> pd.DataFrame:
    """Per `keys` group (in order of appearance): prompts, speedup and compression with their bootstrap intervals
    (columns speedup, speedup_low, speedup_high, compression, compression_low, compression_high).

    df: one row per (prompt, method) with prompt_id, method, new_tokens, wall_s, forward_calls and the `keys`
    columns; every prompt needs a `reference` row (its speedup is 1 with no interval width). Intervals are NaN for
    fewer than MIN_INTERVAL_N prompts.
    """
    needed = set(keys) | {"prompt_id", "method", "new_tokens", "wall_s", "forward_calls"}
    if missing := needed - set(df.columns):
        raise ValueError(f"runs lack columns {sorted(missing)}")
    merged = _paired(df, reference, keys)
    rows = []
    for key, group in merged.groupby(list(keys), sort=False):
        pairs = tuple(group[c].to_numpy(float) for c in ("new_tokens_ref", "wall_s_ref", "new_tokens", "wall_s"))
        counts = tuple(group[c].to_numpy(float) for c in ("new_tokens", "forward_calls"))
        s_low, s_high = interval(speedup, pairs, confidence)
        c_low, c_high = interval(compression, counts, confidence)
        rows.append({**dict(zip(keys, key)), "prompts": len(group),
                     "speedup": float(speedup(*pairs)), "speedup_low": s_low, "speedup_high": s_high,
                     "compression": float(compression(*counts)), "compression_low": c_low,
                     "compression_high": c_high})
    return pd.DataFrame(rows)
