"""The one definition of compression and speedup in the research harness, with 95% bootstrap intervals over
prompts (scipy.stats.bootstrap).

- compression = new tokens / forward passes, token-weighted over prompts: sum(new_tokens) / sum(forward_calls)
  (the paper's step compression; a prompt that generates more tokens counts more).
- speedup = throughput ratio of total times: (sum(new_tokens) / sum(wall_s)) of the method over the same of the
  reference (plain greedy), both run on the same prompts in the same process, interleaved (lab.harness.bench). With
  lossless decoding both generate the same tokens, so this is sum(reference wall_s) / sum(method wall_s).
- Intervals resample prompts (pairs of reference and method rows stay together), BCa where it is defined,
  percentile otherwise; one prompt gives no interval (NaN).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd
from scipy import stats

CONFIDENCE = 0.95
Z95 = float(stats.norm.ppf(0.5 + CONFIDENCE / 2))  # a normal 95% interval is the mean +- Z95 standard deviations
RESAMPLES = 2000
SEED = 0
KEYS = ("prompt_set", "method")  # one summary row per key


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
    """Bootstrap interval of `statistic(*samples, axis=-1)` resampling the paired samples' common index.

    samples: equal-length 1-D arrays, element i of each belonging to prompt i. Returns (low, high); (nan, nan)
    for fewer than two prompts; (value, value) when every resample gives the same value.
    """
    arrays = [np.asarray(s, dtype=float) for s in samples]
    if len({a.shape for a in arrays}) != 1 or arrays[0].ndim != 1:
        raise ValueError(f"samples must be 1-D arrays of one length, got shapes {[a.shape for a in arrays]}")
    if len(arrays[0]) < 2:
        return float("nan"), float("nan")
    kwargs = dict(paired=True, vectorized=True, confidence_level=confidence, n_resamples=n_resamples,
                  random_state=np.random.default_rng(seed))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # degenerate BCa is handled below
        result = stats.bootstrap(arrays, statistic, method="BCa", **kwargs)
        low, high = result.confidence_interval
        if not (np.isfinite(low) and np.isfinite(high)):
            result = stats.bootstrap(arrays, statistic, method="percentile", **kwargs)
            low, high = result.confidence_interval
    if not (np.isfinite(low) and np.isfinite(high)):  # every resample equal (e.g. identical prompts)
        value = float(statistic(*arrays, axis=-1))
        return value, value
    return float(low), float(high)


def _paired(df: pd.DataFrame, reference: str, keys: Sequence[str]) -> pd.DataFrame:
    """Each non-reference row with its prompt's reference row (columns suffixed `_ref`)."""
    ref_keys = [k for k in keys if k != "method"] + ["prompt_id"]
    ref = df[df["method"] == reference][ref_keys + ["new_tokens", "wall_s"]]
    if ref.duplicated(ref_keys).any():
        raise ValueError(f"more than one {reference!r} row for a prompt: {ref[ref.duplicated(ref_keys)].head()}")
    merged = df.merge(ref, on=ref_keys, how="left", suffixes=("", "_ref"))
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
    columns; every prompt needs a `reference` row (its speedup is 1 with no interval width).
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
