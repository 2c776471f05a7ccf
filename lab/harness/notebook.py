"""The plumbing every notebook uses besides its study: where results go, reading and writing them with their
provenance, loading a spec's models, the benchmark runners and the agreement check; one import line per notebook."""

from __future__ import annotations

from lab.harness.agreement import check_agreement
from lab.harness.bench import repeats_for, run_benchmark
from lab.harness.methods import Method, parse_config
from lab.harness.paths import results_dir
from lab.harness.provenance import provenance, weights_sha256
from lab.harness.results import load_results, save_results
from lab.harness.runs import benchmark_models, headline_for, load_entry, per_model
from lab.harness.stats import Z95

__all__ = ["Z95", "Method", "benchmark_models", "check_agreement", "headline_for", "load_entry", "load_results",
           "parse_config", "per_model", "provenance", "repeats_for", "results_dir", "run_benchmark", "save_results",
           "weights_sha256"]
