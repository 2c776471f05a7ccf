"""The notebook manifest: for every notebook, what it runs and produces, in one place. `--plan` (lab.pipeline.plan)
prices its
work, lab.pipeline.specs checks which notebooks measure several models, lab.studies.experiments.RESULT_SCHEMAS names
each results
file's columns, and the notebook tests (tests/repo/test_notebooks.py) check the figures and results it writes and
run it after the notebooks it reads from. A new notebook is one entry here (plus its estimator in
lab.harness.workload)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Notebook:
    name: str  # notebooks/<name>.ipynb
    results: dict[str, str]  # results file it writes (under lab.harness.paths.results_dir) -> schema
    # (lab.studies.experiments.SCHEMAS)
    figures: tuple[str, ...]  # figures it writes (figures/<name>.png and .pdf)
    work: str  # its estimator of the work of a full run, a function of lab.harness.workload:
    # (params, model entry) -> [Work]
    parameters: tuple[str, ...]  # parameters of its `parameters` cell that the estimator reads
    reads: tuple[str, ...] = ()  # results files of other notebooks it reads (they run first)
    multi_model: bool = False  # measures every model of a spec (else exactly one)

    def estimate(self, params: dict[str, Any], entry) -> list:
        """The blocks of work (lab.harness.workload.Work) this notebook runs for `entry` with parameters `params`."""
        from lab.harness import workload  # deferred: the estimators import the runners, which read this manifest

        return getattr(workload, self.work)(params, entry)


ROWS = "rows"  # lab.harness.bench's per-prompt rows
_BENCH = ("n_prompts", "max_new_tokens", "baselines")
NOTEBOOKS: dict[str, Notebook] = {nb.name: nb for nb in (
    Notebook("01_mt_bench_speedup", {"mt_bench.jsonl": ROWS}, ("01_mt_bench_speedup",), "mt_bench",
             (*_BENCH, "headline_prompts"), multi_model=True),
    Notebook("02_humaneval_speedup", {"humaneval.jsonl": ROWS, "gsm8k.jsonl": ROWS},
             ("02_humaneval_speedup", "02_gsm8k_speedup"), "humaneval",
             (*_BENCH, "headline_prompts", "datasets", "gsm8k_prompts"), multi_model=True),
    Notebook("03_scaling_law", {"scaling.jsonl": ROWS}, ("03_scaling_law", "03_parallel_ranks"), "scaling",
             ("n_prompts", "max_new_tokens", "ngram_sizes", "window_sizes", "parallel_ranks", "parallel_share",
              "parallel_prompts")),
    Notebook("04_flops_vs_throughput",
             {"gpu_compression.jsonl": ROWS, "calibration.csv": "calibration", "latency.csv": "latency",
              "gpu_predictions.csv": "gpu_predictions", "cpu_validation.csv": "cpu_validation"},
             ("04_calibration", "04_latency_vs_tokens", "04_gpu_speedup_heatmap", "04_rtx3090_default_vs_tuned",
              "04_cpu_validation"), "flops_vs_throughput",
             ("n_prompts", "max_new_tokens", "configs", "latency_qs", "latency_repeats"),
             reads=("mt_bench.jsonl", "humaneval.jsonl", "scaling.jsonl")),
    Notebook("05_sampling", {"sampling.jsonl": "sampling", "sampling_distribution.csv": "sampling_distribution"},
             ("05_sampling_vs_temperature", "05_sampling_distribution"), "sampling",
             ("n_prompts", "max_new_tokens", "config", "prompt_set", "temperatures", "dist_temperature",
              "dist_samples", "dist_tokens")),
    Notebook("06_ablation", {"ablation.jsonl": ROWS}, ("06_ablation",), "ablation",
             ("n_prompts", "max_new_tokens", "ngram_size")),
    Notebook("07_spec_bench", {"spec_bench.jsonl": ROWS}, ("07_spec_bench",), "spec_bench",
             (*_BENCH, "categories"), multi_model=True),
    Notebook("08_beam_search", {"spec_bench_beam.jsonl": ROWS}, ("08_beam_search",), "beam_search",
             (*_BENCH, "categories", "num_beams"), multi_model=True),
    Notebook("09_batches", {"batches.jsonl": "batches", "batch_headroom.csv": "batch_headroom",
                            "batch_predictions.csv": "batch_predictions"},
             ("09_batch_throughput", "09_batch_gpu_prediction"), "batches",
             ("n_prompts", "max_new_tokens", "batch_sizes", "prompt_sets", "methods"),
             reads=("latency.csv", "calibration.csv", "gpu_predictions.csv")),
    Notebook("10_corpus", {"corpus.jsonl": "corpus"}, ("10_corpus",), "corpus",
             ("n_prompts", "max_new_tokens", "tasks", "corpus_sizes", "two_turn_prompts")),
)}


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
