"""What one `./run_all.sh` invocation runs, resolved from a spec without loading any model: per notebook its
parameters (`prepare` writes them for papermill -f), the weights each model needs (and whether they are here), and
every notebook x model x dataset x method x dtype x device with an estimated time (`show`, i.e. `--plan`).

    python -m lab.pipeline.plan show SPEC [--only NB,..] [--model PATH] [--device D] [--dtype T] [--quick]
    python -m lab.pipeline.plan prepare SPEC --out build/notebooks [same options]

Both exit with MISSING_WEIGHTS_EXIT (3) and one message naming every model whose weights are not obtainable and
every device this torch cannot use here, before any notebook starts; 2 for a spec error (`show` prints the plan
first). The time estimate lives in `estimate_seconds` (swappable).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch
import yaml
from scipy.optimize import nnls

from lab.harness.costmodel import gpus
from lab.harness.models import DTYPES, EMBEDDED_ALIASES, Weights, is_path, locate_weights, models_root
from lab.harness.paths import results_dir
from lab.harness.workload import Work
from lab.pipeline.manifest import NOTEBOOKS, run_order
from lab.pipeline.ready import embedded_model_ready
from lab.pipeline.specs import (
    ModelEntry,
    Spec,
    SpecError,
    check_device,
    config_params,
    load_spec,
    model_entries,
    notebook_parameters,
    override_model,
    parse_size,
)
from lab.studies.validation import HOST_S
from lade.config import LookaheadConfig
from lade.cost import prior_table

MISSING_WEIGHTS_EXIT = 3


# ---- resolving a spec for run_all.sh ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Resolved:
    """A spec as one run_all.sh invocation runs it: per notebook, its papermill parameters (models resolved)."""

    spec: Spec
    params: dict[str, dict[str, Any]]  # notebook -> papermill parameters

    def weights(self) -> dict[str, Weights]:
        """Model name -> where its weights are, for every model some notebook runs."""
        return {m["name"]: locate_weights(m["path"]) for p in self.params.values() for m in p["models"]}


def resolve(spec: Spec, only: list[str] | None = None, model: str | None = None, device: str | None = None,
            dtype: str | None = None, quick: bool = False) -> Resolved:
    """Each notebook's parameters with the command line's overrides; notebooks the (overridden) models do not run
    in are left out."""
    selected = list(spec.notebooks)
    if only:
        stray = [nb for nb in only if nb not in spec.notebooks]
        if stray:
            raise SpecError(f"--only {','.join(stray)}: not in spec {spec.name} "
                            f"(its notebooks: {list(spec.notebooks)})")
        selected = [nb for nb in selected if nb in only]
    if dtype is not None and dtype not in DTYPES:
        raise SpecError(f"--dtype {dtype}: choose one of {sorted(DTYPES)}")
    if device is not None:
        check_device(device, "--device")
    entries = spec.entries()
    if model is not None:
        entries = [override_model(entries, model)]
    out: dict[str, dict[str, Any]] = {}
    for nb in run_order(selected):  # a notebook after those whose results it reads
        params = spec.notebook_params(nb)
        params.update({k: v for k, v in (("device", device), ("dtype", dtype)) if v is not None})
        if quick:
            params["quick"] = True
        params["models"] = [e.to_dict() for e in entries if e.runs_in(nb)]
        if params["models"]:
            out[nb] = params
    if not out:
        raise SpecError(f"{spec.name}: no notebook runs {model or 'its models'} (check the models' `notebooks`)")
    return Resolved(spec, out)


def missing_weights_message(resolved: Resolved) -> str | None:
    """One message naming every model whose weights are neither here nor downloadable, and where to put them."""
    missing = {name: w for name, w in resolved.weights().items() if not w.obtainable}
    if not missing:
        return None
    lines = [f"spec {resolved.spec.name}: the weights of {len(missing)} model(s) are not on this machine:"]
    for name, w in missing.items():
        download = "" if is_path(w.source) else f" (e.g. `hf download {w.source} --local-dir {w.folder}`)"
        lines.append(f"  - {name} ({w.source}): {w.where}. Put the transformers folder (config.json, weights, "
                     f"tokenizer) at {w.folder}{download}")
    lines.append(f"Set LADE_MODELS to the folder holding them (now {models_root()}), or pass --model /path/to/folder.")
    return "\n".join(lines)


def device_problem(device: str) -> str | None:
    """None when this torch can place models on `device` here, else why not and what to install."""
    kind = torch.device(device)
    if kind.type == "mps":
        return None if torch.backends.mps.is_available() else "this torch sees no Apple GPU (MPS) here"
    if kind.type != "cuda":
        return None
    if torch.version.cuda is None and torch.version.hip is None:
        return (f"this torch ({torch.__version__}) is a CPU build: install the CUDA build from "
                "requirements-gpu.lock (docs/reproducing.md, 'The GPU path': rm -rf .venv && "
                "LADE_LOCK=requirements-gpu.lock ./run_tests.sh), or run with --device cpu")
    count = torch.cuda.device_count()
    if not count or (kind.index is not None and kind.index >= count):
        return (f"torch {torch.__version__} sees {count} GPU(s) here (check nvidia-smi and CUDA_VISIBLE_DEVICES), "
                "or run with --device cpu")
    return None


def missing_devices_message(resolved: Resolved, problem: Callable[[str], str | None] = device_problem) -> str | None:
    """One message naming every device the resolved notebooks run on that this machine cannot give them."""
    devices: dict[str, list[str]] = {}
    for nb, params in resolved.params.items():
        devices.setdefault((notebook_parameters(nb) | params).get("device", "cpu"), []).append(nb)
    lines = [f"spec {resolved.spec.name}: device {device} ({', '.join(nbs)}): {problem(device)}"
             for device, nbs in devices.items() if problem(device)]
    return "\n".join(lines) or None


# ---- what each notebook runs ----------------------------------------------------------------------------------------

def notebook_work(notebook: str, p: dict[str, Any], entry: ModelEntry) -> list[Work]:
    """The generation work `notebook` does for `entry` with parameters `p` (its defaults and the spec's), at the
    sizes of a full run: the notebook manifest's estimator."""
    if notebook not in NOTEBOOKS:
        raise SpecError(f"--plan does not know what notebook {notebook} runs: "
                        "add it to lab.pipeline.manifest.NOTEBOOKS")
    return NOTEBOOKS[notebook].estimate(p, entry)


# ---- the time estimate (one function to swap) ---------------------------------------------------------------------

# Achieved rates of a 2-core CPU (SmolLM2-135M fp32, 2 threads, linear layers packed) where no committed results price
# the machine (`cpu_row`): wall = prompt tokens x 1.5 ms + new tokens x 49 ms, i.e. 0.54 GB of weights per token at
# 11 GB/s and 2 x 135M FLOPs per prompt token at 0.18 TFLOP/s.
CPU_ROW = {"peak_tflops": 0.18, "bandwidth_gbs": 11.0}
FIT_RESULTS = ("mt_bench.jsonl", "humaneval.jsonl", "gsm8k.jsonl")  # single-sequence greedy rows cpu_row fits
FIT_MODEL = "SmolLM2-135M-Instruct"
GPU_EFFICIENCY = (0.5, 0.8)  # achieved share of datasheet FLOP/s and bandwidth (notebook 04's assumption)
# Per-forward framework overhead on a GPU (kernel launches, Python): the blog's greedy baselines on an A100 (7B 42,
# 13B 32, 34B 19 tok/s: 24 / 31 / 53 ms per token) exceed the roofline (8 / 16 / 42 ms) by 11-16 ms.
GPU_FORWARD_OVERHEAD_S = 0.015
PROMPT_TOKENS = 256  # typical prompt length for the prefill
NOTEBOOK_OVERHEAD_S = 20.0  # kernel start, imports, figures
LOAD_BYTES_PER_S = 1e9  # reading weights from disk


def cpu_row(results: Path | None = None) -> dict[str, float]:
    """Achieved FLOP/s and bandwidth of the CPU that produced the committed results (`results`: data/results): wall =
    prompt tokens x a + new tokens x b fitted by non-negative least squares to their fp32 greedy rows of the embedded
    model (b: one token's weight reads, a: a prompt token's 2 x params FLOPs), so --plan prices a run on that
    machine; CPU_ROW where there are fewer than three such rows."""
    folder = results or results_dir()
    frames = [pd.read_json(folder / name, lines=True) for name in FIT_RESULTS if (folder / name).is_file()]
    rows = pd.concat(frames) if frames else pd.DataFrame(columns=["method", "dtype", "model"])
    rows = rows[(rows["method"] == "greedy") & (rows["dtype"] == "float32") & (rows["model"] == FIT_MODEL)]
    if len(rows) < 3:
        return CPU_ROW
    (a, b), _ = nnls(rows[["prompt_tokens", "new_tokens"]].to_numpy(float), rows["wall_s"].to_numpy(float))
    params = config_params("embedded") or parse_size("135M")
    return {"peak_tflops": 2 * params / a / 1e12 if a > 0 else CPU_ROW["peak_tflops"],
            "bandwidth_gbs": params * 4 / b / 1e9 if b > 0 else CPU_ROW["bandwidth_gbs"]}


def hardware_row(hardware: str) -> dict[str, float]:
    """Achieved peak FLOP/s and bandwidth of 'cpu' (`cpu_row`) or a data/gpus.csv GPU class."""
    if hardware == "cpu":
        return cpu_row()
    known = gpus()
    if hardware not in known:
        raise SpecError(f"hardware {hardware!r}: use 'cpu' or a GPU of data/gpus.csv: {list(known)}")
    flop, bandwidth = GPU_EFFICIENCY
    return {"peak_tflops": known[hardware].peak_tflops * flop,
            "bandwidth_gbs": known[hardware].bandwidth_gbs * bandwidth}


def _roofline(params: float, q: int, row: dict[str, float], width: int) -> float:
    """A step's roofline: its weight reads at the achieved bandwidth, or its 2 x params x q FLOPs at the achieved
    FLOP/s (a planning estimate; notebook 04's calibrated cost model adds the KV cache, attention and overheads)."""
    return max(2 * params * q / (row["peak_tflops"] * 1e12), params * width / (row["bandwidth_gbs"] * 1e9))


def _prior(config: tuple[int, ...]) -> tuple[float, float]:
    """(compression, tokens per step) of a config: the cost prior's nearest config by full step size (its
    compression; a window config's step priced at its own full size 1 + (W + G)(N - 1), a pool-only one's at the
    prior's mean, most of its steps feeding one token)."""
    def full(key: tuple[int, ...]) -> int:
        return LookaheadConfig.from_key(key).max_step_tokens()

    table = prior_table("mixed")
    compression, step_tokens, _ = table[min(table, key=lambda k: abs(full(k) - full(config)))]
    return compression, float(full(config) if config[1] else step_tokens)


def estimate_seconds(work: list[Work], params: float, dtype: str, hardware: str) -> list[float]:
    """Seconds of each block of one model's work (loading the weights counted in the first): a prefill per prompt and
    repeat and the decoding steps, priced by the roofline of `hardware` (`_roofline` of `params` weights in
    `dtype`, plus a per-forward overhead on GPUs); lookahead steps at the cost prior's compression."""
    row, width = hardware_row(hardware), 4 if dtype == "float32" else 2
    overhead = 0.0 if hardware == "cpu" else GPU_FORWARD_OVERHEAD_S
    latency: Callable[[float], float] = lambda q: _roofline(params, int(q), row, width) + overhead
    seconds = []
    for w in work:
        compression, q = _prior(w.config) if w.config else (1.0, 1.0)
        step = latency(q * w.rows) + (HOST_S if w.config else 0.0)
        prefill = latency(PROMPT_TOKENS * w.rows)
        seconds.append(w.forwards * latency(1) + w.prompts * w.repeats * (prefill + w.tokens / compression * step))
    seconds[0] += params * width / LOAD_BYTES_PER_S
    return seconds


# ---- the plan table -----------------------------------------------------------------------------------------------

def model_params(entry: ModelEntry) -> float | None:
    """Parameters from the weights' config.json if present, else the spec's size."""
    return config_params(entry.path) or parse_size(entry.size)


def plan_table(resolved: Resolved) -> pd.DataFrame:
    """One row per notebook x model x dataset x method, with dtype, device, weights and estimated seconds."""
    rows = []
    for nb, given in resolved.params.items():
        p = notebook_parameters(nb) | given
        for entry in model_entries(p["model"], p["models"], p.get("configs", []), p.get("prompt_format", "auto"), nb):
            work, weights, params = notebook_work(nb, p, entry), entry.weights(), model_params(entry)
            seconds = (estimate_seconds(work, params, p["dtype"], resolved.spec.hardware) if params
                       else [None] * len(work))
            for w, s in zip(work, seconds):
                rows.append({"notebook": nb, "model": entry.name, "weights": weights.source,
                             "present": "yes" if weights.present else "NO", "dataset": w.dataset, "method": w.method,
                             "dtype": p["dtype"], "device": p["device"],
                             "prompts x tokens": f"{w.prompts} x {w.tokens}", "repeats": w.repeats,
                             "est_s": None if s is None else s + NOTEBOOK_OVERHEAD_S / len(work)})
    return pd.DataFrame(rows)


def show(resolved: Resolved) -> str:
    """The plan as text: what the spec reproduces, the weights, every run with its estimate, the total."""
    spec, table = resolved.spec, plan_table(resolved)
    about = spec.about
    lines = [f"spec {spec.name}: {about.get('title', '')}", f"  reproduces: {about.get('reproduces', '-')}",
             f"  published on: {about.get('hardware', '-')}; estimate priced on: {spec.hardware}", "weights:"]
    lines += [f"  {name}: {w.source} -> {'present' if w.present else 'MISSING'} ({w.where})"
              for name, w in resolved.weights().items()]
    if any(p.get("quick") for p in resolved.params.values()):
        lines.append("quick: each notebook shrinks its prompts and tokens; the sizes and times below are a full run's")
    with pd.option_context("display.width", 250, "display.max_rows", 1000, "display.max_colwidth", 40):
        lines.append(table.assign(est_s=table["est_s"].map(lambda s: "?" if pd.isna(s) else f"{s:.0f}"))
                     .to_string(index=False))
    known = table["est_s"].dropna()
    per_nb = table.groupby("notebook", sort=False)["est_s"].sum(min_count=1)
    lines.append("estimated time per notebook: " + ", ".join(f"{nb} {s / 60:.1f} min" for nb, s in per_nb.items()
                                                              if pd.notna(s)))
    lines.append(f"estimated total: {known.sum() / 60:.1f} min ({known.sum() / 3600:.2f} h)"
                 + ("" if len(known) == len(table) else "; rows marked ? have no size to price"))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.pipeline.plan", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["show", "prepare"])
    parser.add_argument("spec", type=Path, help="a spec file (data/experiments/*.yaml)")
    parser.add_argument("--only", default="", help="comma-separated notebook names")
    parser.add_argument("--model", default=None)
    parser.add_argument("--device", default=None)
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=None, help="prepare: folder for NAME.params.yaml")
    args = parser.parse_args(argv)
    only = [n.strip().removesuffix(".ipynb") for n in args.only.split(",") if n.strip()]
    try:
        resolved = resolve(load_spec(args.spec), only or None, args.model, args.device, args.dtype, args.quick)
        if args.command == "show":
            print(show(resolved))
    except SpecError as err:
        print(f"spec error: {err}", file=sys.stderr)
        return 2
    message = "\n".join(m for m in (missing_weights_message(resolved), missing_devices_message(resolved)) if m)
    if message:
        print(message, file=sys.stderr)
        return MISSING_WEIGHTS_EXIT
    if args.command == "prepare":
        if args.out is None:
            parser.error("prepare needs --out")
        if any(m["path"].lower() in EMBEDDED_ALIASES for p in resolved.params.values() for m in p["models"]):
            # set-up's step (idempotent): the notebooks load it from the cache; stdout lists only notebooks
            embedded_model_ready(sys.stderr)
        args.out.mkdir(parents=True, exist_ok=True)
        for nb, params in resolved.params.items():
            (args.out / f"{nb}.params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
            print(nb)
    return 0


if __name__ == "__main__":
    sys.exit(main())
