"""Notebook 08: lookahead beam search against plain beam search on the Spec-Bench tasks, per model."""

from __future__ import annotations

from lab.harness.bench import ROW_COLUMNS
from lab.harness.methods import Method
from lab.harness.runs import SpecModel, methods_for
from lab.harness.workload import BENCH_PARAMETERS, Params, Study, Work, bench_work, spec_bench_sets
from lab.studies.figures import spec_bench_plot
from lab.studies.findings import spec_bench as findings
from lab.studies.spec_bench import TASK_LABELS, task_summary

__all__ = ["STUDY", "TASK_LABELS", "findings", "spec_bench_plot", "task_summary"]  # what the notebook calls


def estimate(p: Params, entry: SpecModel) -> list[Work]:
    """Plain beam search (the reference) and each lade method, `num_beams` rows per forward."""
    methods = [Method.plain(p["num_beams"])] + [m for m in methods_for(entry, p["baselines"]) if m.kind != "greedy"]
    return bench_work(spec_bench_sets(p, entry), methods, p["max_new_tokens"], rows=p["num_beams"])


STUDY = Study(
    "08_beam_search",
    {"spec_bench_beam.jsonl": tuple(ROW_COLUMNS)},
    ("08_beam_search",),
    estimate,
    (*BENCH_PARAMETERS, "categories", "num_beams"),
    multi_model=True,
)
