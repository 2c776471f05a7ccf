"""Notebook 05: lookahead sampling against plain sampling: speed per temperature and the token distributions."""

from __future__ import annotations

from lab.harness.bench import REPEATS
from lab.harness.runs import SpecModel
from lab.harness.workload import Params, Study, Work
from lab.studies import sampling_check as check
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

__all__ = ["STUDY", "check", "distribution_plot", "findings", "model_params", "run_sampling", "sample_continuations",
           "sampling_plot", "total_variation"]  # what the notebook calls


def estimate(p: Params, entry: SpecModel) -> list[Work]:
    key = LookaheadConfig.from_label(p["config"]).key
    runs = [
        Work(p["prompt_set"], f"{kind} T={t}", cfg, p["n_prompts"], p["max_new_tokens"], repeats=REPEATS)
        for t in p["temperatures"]
        for kind, cfg in (("plain sampling", None), ("lade sampling", key))
    ]
    runs += [
        Work("distribution check", f"{kind} T={p['dist_temperature']}", cfg, p["dist_samples"], p["dist_tokens"])
        for kind, cfg in (("plain x2", None), ("plain x2", None), ("lade", key))
    ]
    return runs + check_work(check.SIZES[p["check_size"]], key, p["check_biased"])


def check_work(size: check.Size, key: tuple[int, ...], biased: bool) -> list[Work]:
    """The losslessness check's draws (lab.studies.sampling_check): per setting, pilot, plain, the plain control and
    lade in batches of size.batch rows, lade auto one row per call, and with `biased` the power runs."""
    batched = -(-size.samples // size.batch)  # generate calls of size.batch rows
    draws = [("pilot + plain + control", None, 3), ("lade", key, 1)]
    if biased:
        draws += [("power: plain", None, size.replicates - 1), ("power: biased lade", key, size.replicates)]
    work = []
    for s in check.SETTINGS[: size.settings]:
        work += [Work(f"sampling check {s.name}", label, cfg, batched * times, size.tokens, rows=size.batch)
                 for label, cfg, times in draws if times > 0]
        work.append(Work(f"sampling check {s.name}", "lade auto", None, size.samples, size.tokens))
    return work


STUDY = Study(
    "05_sampling",
    {"sampling.jsonl": SAMPLING_COLUMNS, "sampling_distribution.csv": DISTRIBUTION_COLUMNS,
     "sampling_check.jsonl": check.SAMPLE_COLUMNS},
    ("05_sampling_vs_temperature", "05_sampling_distribution", "05_sampling_check"),
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
        "check_size",
        "check_biased",
    ),
)
