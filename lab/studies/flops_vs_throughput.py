"""Notebook 04: FLOPs against throughput: the calibrated cost model, its GPU predictions and its CPU validation."""

from __future__ import annotations

from lab.harness.bench import ROW_COLUMNS
from lab.harness.costmodel import CONTEXT, gpus
from lab.harness.methods import Method
from lab.harness.runs import SpecModel
from lab.harness.workload import Params, Study, Work, bench_work
from lab.studies.calibration import (
    CALIBRATION_COLUMNS,
    Fit,
    class_sigma,
    compression_lookup,
    fit,
    leave_one_out,
    load_published,
    observations,
    transfer_error,
)
from lab.studies.experiments import model_params
from lab.studies.figures_cost import (
    calibration_plot,
    cpu_validation_plot,
    gpu_speedup_heatmap,
    latency_plot,
    rtx3090_plot,
)
from lab.studies.findings import cost_model as findings
from lab.studies.gpu_model import (
    GPU_PREDICTION_COLUMNS,
    LATENCY_COLUMNS,
    best_configs,
    gpu_case,
    latency_curves,
    predict_grid,
    published_step_costs,
    reference_compression,
    when_it_pays,
)
from lab.studies.validation import (
    VALIDATION_COLUMNS,
    measure_profile,
    median_abs_error,
    profile_from_table,
    typical_context,
    validate_files,
)

# what the notebook calls
__all__ = ["CONTEXT", "STUDY", "Fit", "best_configs", "calibration_plot", "class_sigma", "compression_lookup",
           "cpu_validation_plot", "findings", "fit", "gpu_case", "gpu_speedup_heatmap", "gpus", "latency_curves",
           "latency_plot", "leave_one_out", "load_published", "measure_profile", "median_abs_error", "model_params",
           "observations", "predict_grid", "profile_from_table", "published_step_costs", "reference_compression",
           "rtx3090_plot", "transfer_error", "typical_context", "validate_files", "when_it_pays"]


def estimate(p: Params, entry: SpecModel) -> list[Work]:
    n = p["n_prompts"]
    grid = [Method.greedy(), *(Method.parse(f"lade:{c}") for c in p["configs"])]
    latency = Work(
        "random context", "latency profile", None, 0, 0, forwards=len(p["latency_qs"]) * (p["latency_repeats"] + 1)
    )
    return bench_work({"mt_bench": n, "humaneval": n}, grid, p["max_new_tokens"]) + [latency]


STUDY = Study(
    "04_flops_vs_throughput",
    {
        "gpu_compression.jsonl": tuple(ROW_COLUMNS),
        "calibration.csv": CALIBRATION_COLUMNS,
        "latency.csv": LATENCY_COLUMNS,
        "gpu_predictions.csv": GPU_PREDICTION_COLUMNS,
        "cpu_validation.csv": VALIDATION_COLUMNS,
    },
    (
        "04_calibration",
        "04_latency_vs_tokens",
        "04_gpu_speedup_heatmap",
        "04_rtx3090_default_vs_tuned",
        "04_cpu_validation",
    ),
    estimate,
    ("n_prompts", "max_new_tokens", "configs", "latency_qs", "latency_repeats"),
    reads=("mt_bench.jsonl", "humaneval.jsonl", "scaling.jsonl"),
)
