"""Notebooks 01 and 02: lookahead speedup over greedy per model of the spec, beside the published speedups, on MT-Bench
(01) and on HumanEval and GSM8K (02): one study on two sets of datasets."""

from __future__ import annotations

from pathlib import Path

from lab.harness.bench import ROW_COLUMNS
from lab.harness.intro import run_intro
from lab.harness.runs import SpecModel
from lab.harness.workload import BENCH_PARAMETERS, Params, Study, Work, headline_bench_work
from lab.studies.experiments import published_speedups, speedup_summary
from lab.studies.figures import speedup_bars, speedup_by_model
from lab.studies.findings import speedups as findings

__all__ = ["HUMANEVAL", "MT_BENCH", "findings", "intro", "published_speedups", "speedup_bars", "speedup_by_model",
           "speedup_summary"]  # what the notebooks call


def mt_bench_estimate(p: Params, entry: SpecModel) -> list[Work]:
    return headline_bench_work({"mt_bench": p["n_prompts"]}, entry, p)


def humaneval_estimate(p: Params, entry: SpecModel) -> list[Work]:
    sets = {d: p["gsm8k_prompts"] if d == "gsm8k" else p["n_prompts"] for d in p["datasets"] if entry.runs_on(d)}
    return headline_bench_work(sets, entry, p)


MT_BENCH = Study("01_mt_bench_speedup", {"mt_bench.jsonl": tuple(ROW_COLUMNS)}, ("01_mt_bench_speedup",),
                 mt_bench_estimate, (*BENCH_PARAMETERS, "headline_prompts"), multi_model=True)
HUMANEVAL = Study("02_humaneval_speedup", {"humaneval.jsonl": tuple(ROW_COLUMNS), "gsm8k.jsonl": tuple(ROW_COLUMNS)},
                  ("02_humaneval_speedup", "02_gsm8k_speedup"), humaneval_estimate,
                  (*BENCH_PARAMETERS, "headline_prompts", "datasets", "gsm8k_prompts"), multi_model=True)


def intro(path: Path) -> str:
    """Notebooks 01 and 02: the methods, prompt sets and counts their results file holds."""
    return run_intro(path)
