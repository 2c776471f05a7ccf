"""Notebook 09: lookahead in batches: throughput over plain batched greedy, its headroom, and GPU predictions."""

from __future__ import annotations

import math
from pathlib import Path

from lab.harness.batched import (
    BATCH_COLUMNS,
    REFERENCE,
    check_rows,
    run_batched,
    step_width_quantiles,
    summarize_batches,
)
from lab.harness.bench import REPEATS
from lab.harness.intro import run_intro
from lab.harness.methods import Method
from lab.harness.results import load_results
from lab.harness.runs import SpecModel
from lab.harness.stats import is_aa
from lab.harness.workload import Params, Study, Work
from lab.studies.batch_headroom import HEADROOM_COLUMNS, replayed, summarize_headroom
from lab.studies.calibration import Fit
from lab.studies.figures_batch import batch_prediction_plot, batch_throughput_plot
from lab.studies.findings import batches as findings
from lab.studies.gpu_model import BATCH_PREDICTION_COLUMNS, predict_batches

__all__ = ["REFERENCE", "STUDY", "Fit", "batch_prediction_plot", "batch_throughput_plot", "check_rows",
           "compared_methods", "findings", "intro", "predict_batches", "replayed", "run_batched",
           "step_width_quantiles", "summarize_batches", "summarize_headroom"]  # what the notebook calls


def compared_methods(rows) -> list[str]:
    """The methods notebook 09 draws against plain batched greedy, in the rows' order (its A/A row is the noise
    floor the findings give, not a method)."""
    return [m for m in dict.fromkeys(rows["method"]) if m != REFERENCE and not is_aa(m)]


def estimate(p: Params, entry: SpecModel) -> list[Work]:
    """Plain batched greedy and each lade method on every batch of each size, REPEATS times: one prompt per batch of
    B rows per forward (a step of B rows reads the weights once)."""
    methods = [Method.greedy(), *(Method.parse(m) for m in p["methods"])]
    return [
        Work(name, f"{m.name} B={b}", None, math.ceil(p["n_prompts"] / b), p["max_new_tokens"], rows=b,
             repeats=REPEATS)
        for name in p["prompt_sets"]
        for b in p["batch_sizes"]
        for m in methods
    ]


STUDY = Study(
    "09_batches",
    {
        "batches.jsonl": tuple(BATCH_COLUMNS),
        "batch_headroom.csv": tuple(HEADROOM_COLUMNS),
        "batch_predictions.csv": BATCH_PREDICTION_COLUMNS,
    },
    ("09_batch_throughput", "09_batch_gpu_prediction"),
    estimate,
    ("n_prompts", "max_new_tokens", "batch_sizes", "prompt_sets", "methods"),
    reads=("latency.csv", "calibration.csv", "gpu_predictions.csv"),
)


def intro(path: Path) -> str:
    """Notebook 09: the methods, prompt sets, counts and batch sizes its results file holds."""
    rows = load_results(path)
    return run_intro(path, [("batch sizes", sorted(int(b) for b in rows["batch_size"].unique()))])
