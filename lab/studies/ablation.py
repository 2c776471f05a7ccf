"""Notebook 06: the paper's ablation (Table 3): prompt n-grams, output n-grams and the window, one at a time."""

from __future__ import annotations

from lab.harness.bench import ROW_COLUMNS
from lab.harness.methods import Method
from lab.harness.runs import SpecModel
from lab.harness.workload import Params, Study, Work, bench_work
from lab.studies.experiments import ablation_methods, ablation_table, model_params
from lab.studies.figures import ablation_plot
from lab.studies.findings import ablation as findings

# what the notebook calls
__all__ = ["STUDY", "ablation_methods", "ablation_plot", "ablation_table", "findings", "model_params"]


def estimate(p: Params, entry: SpecModel) -> list[Work]:
    methods = [Method.greedy(), *ablation_methods(p["ngram_size"]).values()]
    return bench_work({"mt_bench": p["n_prompts"]}, methods, p["max_new_tokens"])


STUDY = Study(
    "06_ablation",
    {"ablation.jsonl": tuple(ROW_COLUMNS)},
    ("06_ablation",),
    estimate,
    ("n_prompts", "max_new_tokens", "ngram_size"),
)
