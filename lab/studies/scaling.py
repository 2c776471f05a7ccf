"""Notebook 03: the scaling law (compression against window size W per n-gram size N) and lookahead parallelism."""

from __future__ import annotations

from lab.harness.bench import ROW_COLUMNS
from lab.harness.methods import Method
from lab.harness.runs import SpecModel
from lab.harness.workload import Params, Study, Work, bench_work
from lab.studies.experiments import log_slope, model_params, scaling_methods, scaling_table
from lab.studies.figures import ranks_plot, scaling_plot
from lab.studies.findings import scaling as findings
from lab.studies.parallel import compression_vs_ranks

__all__ = ["STUDY", "compression_vs_ranks", "findings", "log_slope", "model_params", "ranks_plot", "scaling_methods",
           "scaling_plot", "scaling_table"]  # what the notebook calls


def estimate(p: Params, entry: SpecModel) -> list[Work]:
    n, tokens, share = p["n_prompts"], p["max_new_tokens"], p["parallel_share"]
    grid = [Method.greedy(), *scaling_methods(p["ngram_sizes"], p["window_sizes"])]
    ranks = [
        Work(
            "mt_bench+humaneval",
            f"{r} rank(s)",
            (p["ngram_sizes"][0], r * share, r * share),
            2 * p.get("parallel_prompts", n),
            tokens,
        )
        for r in p["parallel_ranks"]
    ]
    return bench_work({"mt_bench": n, "humaneval": n}, grid, tokens) + ranks


STUDY = Study(
    "03_scaling_law",
    {"scaling.jsonl": tuple(ROW_COLUMNS)},
    ("03_scaling_law", "03_parallel_ranks"),
    estimate,
    (
        "n_prompts",
        "max_new_tokens",
        "ngram_sizes",
        "window_sizes",
        "parallel_ranks",
        "parallel_share",
        "parallel_prompts",
    ),
)
