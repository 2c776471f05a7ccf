"""Validating the cost model where we can measure: predict each measured lade run's time on this device from the
measured latency profile and the run's own step mix, and compare the predicted speedup over plain greedy with
the measured one (ratio of total times, lab.harness.stats).

A run of `new` tokens in `calls` forwards (the first one the prefill of `prompt_tokens`) is predicted to take

    profile(prompt_tokens) + (calls - 1) x (lade.cost.step_latency(profile, step_tokens, single_share) + host)

with host = plain decoding's per-step time outside the forward (measured on the greedy runs) plus, for lookahead,
HOST_S (a drafting row's host work per step as scripts/host_cost.py measured it; lade.auto now measures it with
each latency profile). Nothing timed in a lookahead run enters its prediction.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from lab.harness.results import load_results
from lab.harness.stats import summarize_runs
from lade.cost import LatencyProfile, measure_latency, step_latency

HOST_S = 1.8e-3  # a drafting row's host work per step, seconds (scripts/host_cost.py, embedded model, 2-core CPU)

VALIDATION_COLUMNS = ("results_file", "prompt_set", "method", "config", "prompts", "speedup", "speedup_low",
                      "speedup_high", "predicted_speedup", "error")


def measure_profile(model, qs: Sequence[int], context: int, repeats: int) -> LatencyProfile:
    """Per q, the median over `repeats` independent timings (each lade.cost.measure_latency with one repeat after
    its warm-up round): a typical step rather than the fastest one, as a whole run experiences them."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    runs = [measure_latency(model, qs=tuple(qs), context=context, repeats=1) for _ in range(repeats)]
    seconds = np.median([r.seconds for r in runs], axis=0)
    return LatencyProfile(runs[0].key, runs[0].context, runs[0].qs, tuple(float(s) for s in seconds))


def profile_from_table(latency: pd.DataFrame) -> LatencyProfile:
    """The measured profile stored in latency.csv (rows with source == "measured")."""
    rows = latency[latency["source"] == "measured"].sort_values("q")
    if rows.empty:
        raise ValueError("latency table has no measured rows")
    return LatencyProfile("latency.csv", 0, tuple(int(q) for q in rows["q"]), tuple(rows["seconds"]))


def typical_context(paths: Sequence[Path], default: int) -> int:
    """Median cached tokens of the greedy runs in the results files that exist (prompt plus half the answer), to
    measure the latency profile where the runs spend their steps; `default` if there are none."""
    frames = [load_results(p) for p in paths if Path(p).exists()]
    greedy = [f[f["method"] == "greedy"] for f in frames]
    values = np.concatenate([g["prompt_tokens"] + g["new_tokens"] / 2 for g in greedy]) if greedy else []
    return int(round(float(np.median(values)))) if len(values) else default


def plain_host_s(rows: pd.DataFrame) -> float:
    """Median per-forward time outside the model of the plain greedy runs."""
    greedy = rows[rows["method"] == "greedy"]
    if greedy.empty:
        raise ValueError("no greedy rows: the reference runs are needed")
    return float(((greedy["wall_s"] - greedy["forward_s"]) / greedy["forward_calls"]).median())


def predicted_wall(rows: pd.DataFrame, profile: LatencyProfile, plain_host: float) -> np.ndarray:
    """Predicted seconds of each run (greedy and lookahead rows alike) from its step counts alone."""
    out = []
    for r in rows.itertuples():
        host = plain_host + (HOST_S if r.method != "greedy" else 0.0)
        step = step_latency(profile, float(r.step_tokens), float(r.single_token_steps))
        out.append(profile(float(r.prompt_tokens)) + (r.forward_calls - 1) * (step + host))
    return np.asarray(out)


def validate(rows: pd.DataFrame, profile: LatencyProfile, results_file: str = "") -> pd.DataFrame:
    """Measured (with 95% interval) and predicted speedup of every lookahead method in benchmark `rows`."""
    lade_rows = rows[(rows["config"] != "") | (rows["method"] == "greedy")]
    predicted = lade_rows.assign(wall_s=predicted_wall(lade_rows, profile, plain_host_s(rows)))
    measured = summarize_runs(lade_rows)
    model = summarize_runs(predicted)[["prompt_set", "method", "speedup"]].rename(
        columns={"speedup": "predicted_speedup"})
    out = measured.merge(model, on=["prompt_set", "method"])
    out = out[out["method"] != "greedy"].copy()
    out["config"] = out["method"].map(lade_rows.drop_duplicates("method").set_index("method")["config"])
    out["results_file"] = results_file
    out["error"] = out["predicted_speedup"] / out["speedup"] - 1
    return out[list(VALIDATION_COLUMNS)].reset_index(drop=True)


def validate_files(paths: Sequence[Path], profile: LatencyProfile) -> pd.DataFrame:
    """`validate` over every benchmark results file that exists (others are skipped)."""
    parts = [validate(load_results(p), profile, Path(p).name) for p in paths if Path(p).exists()]
    if not parts:
        raise FileNotFoundError(f"none of the results files exist: {[str(p) for p in paths]}")
    return pd.concat(parts, ignore_index=True)


def median_abs_error(table: pd.DataFrame) -> float:
    return float(table["error"].abs().median())
