"""Notebook 05: lookahead sampling against plain sampling: speed per temperature and the token distributions."""

from __future__ import annotations

from lab.harness.runs import SpecModel
from lab.harness.workload import Params, Study, Work
from lab.studies.experiments import (
    DISTRIBUTION_COLUMNS,
    SAMPLING_COLUMNS,
    model_params,
    run_sampling,
    sample_continuations,
    total_variation,
)
from lab.studies.figures import distribution_plot, sampling_plot
from lab.studies.findings import sampling as findings
from lade.config import LookaheadConfig

__all__ = ["STUDY", "distribution_plot", "findings", "model_params", "run_sampling", "sample_continuations",
           "sampling_plot", "total_variation"]  # what the notebook calls


def estimate(p: Params, entry: SpecModel) -> list[Work]:
    key = LookaheadConfig.from_label(p["config"]).key
    runs = [
        Work(p["prompt_set"], f"{kind} T={t}", cfg, p["n_prompts"], p["max_new_tokens"])
        for t in p["temperatures"]
        for kind, cfg in (("plain sampling", None), ("lade sampling", key))
    ]
    return runs + [
        Work("distribution check", f"{kind} T={p['dist_temperature']}", cfg, p["dist_samples"], p["dist_tokens"])
        for kind, cfg in (("plain x2", None), ("plain x2", None), ("lade", key))
    ]


STUDY = Study(
    "05_sampling",
    {"sampling.jsonl": SAMPLING_COLUMNS, "sampling_distribution.csv": DISTRIBUTION_COLUMNS},
    ("05_sampling_vs_temperature", "05_sampling_distribution"),
    estimate,
    (
        "n_prompts",
        "max_new_tokens",
        "config",
        "prompt_set",
        "temperatures",
        "dist_temperature",
        "dist_samples",
        "dist_tokens",
    ),
)
