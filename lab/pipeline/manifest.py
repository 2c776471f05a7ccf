"""The study registry: one Study (lab.harness.workload.Study) per notebook, taken from its study module in
lab.studies: what it runs and produces, its results files' columns and its --plan estimator. `--plan`
(lab.pipeline.plan) prices its work, lab.pipeline.specs checks which notebooks measure several models, and the
notebook tests (tests/repo/test_notebooks.py) check the figures and results it writes and run it after the notebooks
it reads from. A new notebook is its study module plus one line here."""

from __future__ import annotations

from lab.harness.workload import Study
from lab.studies import (
    ablation,
    batches,
    beam_search,
    corpus,
    flops_vs_throughput,
    sampling,
    scaling,
    spec_bench,
    speedup,
)

NOTEBOOKS: dict[str, Study] = {study.name: study for study in (
    speedup.MT_BENCH, speedup.HUMANEVAL, scaling.STUDY, flops_vs_throughput.STUDY, sampling.STUDY, ablation.STUDY,
    spec_bench.STUDY, beam_search.STUDY, batches.STUDY, corpus.STUDY)}
RESULT_SCHEMAS: dict[str, tuple[str, ...]] = {  # results file -> required columns, for every notebook's results
    file: tuple(columns) for nb in NOTEBOOKS.values() for file, columns in nb.results.items()}


def writer_of(results_file: str) -> str:
    """The notebook that writes `results_file`."""
    (name,) = [nb.name for nb in NOTEBOOKS.values() if results_file in nb.results]
    return name


def depends_on(notebook: str) -> tuple[str, ...]:
    """The notebooks whose results `notebook` reads, in manifest order."""
    writers = {writer_of(f) for f in NOTEBOOKS[notebook].reads}
    return tuple(nb for nb in NOTEBOOKS if nb in writers)


def multi_model_notebooks() -> tuple[str, ...]:
    return tuple(nb.name for nb in NOTEBOOKS.values() if nb.multi_model)


def run_order(names: list[str]) -> list[str]:
    """`names` in their order, except that a notebook runs after those of `names` whose results it reads."""
    ordered: list[str] = []

    def place(name: str) -> None:
        if name not in ordered:
            for needed in depends_on(name) if name in NOTEBOOKS else ():
                if needed in names:
                    place(needed)
            ordered.append(name)

    for name in names:
        place(name)
    return ordered
