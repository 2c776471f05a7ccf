"""Spec-Bench (Xia et al., Findings of ACL 2024): our per-task results beside its published leaderboard rows.

The frozen questions are lab.harness.prompts' "spec_bench" set (six tasks, SPEC_BENCH_TASKS); the leaderboard's
Lookahead and PLD rows (RTX 3090 and A100, Vicuna 7B/13B/33B, fp16, greedy) are data/published/spec_bench.csv.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from lab.harness.bench import ROW_COLUMNS
from lab.harness.intro import run_intro
from lab.harness.paths import published
from lab.harness.prompts import SPEC_BENCH_TASKS
from lab.harness.runs import SpecModel, methods_for, per_model
from lab.harness.workload import BENCH_PARAMETERS, Params, Study, Work, bench_work, spec_bench_sets
from lab.studies.experiments import speedup_summary
from lab.studies.figures import spec_bench_plot
from lab.studies.figures_run import TASK_LABELS
from lab.studies.findings import spec_bench as findings

# what notebook 07 calls (notebook 08, lab.studies.beam_search, reads the same tasks)
__all__ = ["STUDY", "TASK_LABELS", "beside_published", "findings", "intro", "published_leaderboard", "spec_bench_plot",
           "task_summary"]



def published_leaderboard(methods: tuple[str, ...] = ("lookahead", "pld")) -> pd.DataFrame:
    """Leaderboard rows of `methods` per task (and 'overall'), with a `setup` label 'device, model'."""
    table = pd.read_csv(published("spec_bench"))
    table = table[table["method"].isin(methods)].copy()
    table["setup"] = table["device"] + ", " + table["model"]
    return table.reset_index(drop=True)


def task_summary(rows: pd.DataFrame) -> pd.DataFrame:
    """experiments.speedup_summary per model, with the Spec-Bench `task` of each prompt set ('spec_bench:TASK')."""
    summary = per_model(rows, speedup_summary)
    summary["task"] = summary["prompt_set"].str.partition(":")[2]
    unknown = set(summary["task"]) - set(SPEC_BENCH_TASKS) - set(sum(SPEC_BENCH_TASKS.values(), ()))
    if unknown:
        raise ValueError(f"rows of prompt sets that are not Spec-Bench tasks: {sorted(unknown)}")
    return summary


def beside_published(summary: pd.DataFrame, leaderboard: pd.DataFrame,
                     setup: str = "A100 80GB, Vicuna-7B-v1.3") -> pd.DataFrame:
    """Per task: this run's speedup (ratio of total times) per model and method beside the leaderboard's rows for
    `setup`."""
    ours = summary[summary["method"] != "greedy"].assign(column=lambda d: d["model"] + ": " + d["method"])
    ours = ours.pivot_table(index="task", columns="column", values="speedup")
    theirs = leaderboard[leaderboard["setup"] == setup].pivot(index="task", columns="method", values="speedup")
    return ours.join(theirs.add_prefix(f"published {setup}: "), how="left")


def estimate(p: Params, entry: SpecModel) -> list[Work]:
    return bench_work(spec_bench_sets(p, entry), methods_for(entry, p["baselines"]), p["max_new_tokens"])


STUDY = Study("07_spec_bench", {"spec_bench.jsonl": tuple(ROW_COLUMNS)}, ("07_spec_bench",), estimate,
              (*BENCH_PARAMETERS, "categories"), multi_model=True)


def intro(path: Path) -> str:
    """Notebook 07: the methods, Spec-Bench tasks and counts its results file holds."""
    return run_intro(path)
