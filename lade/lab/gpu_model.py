"""GPU classes and the roofline model of one decoding step: what a forward of q tokens costs on hardware we cannot
run here, for Llama-2 shapes, from datasheet peak FLOP/s and memory bandwidth; and the measured latency profile of
the device we can run on (lade.cost), on the same axes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..cost import measure_latency
from .paths import GPUS_CSV, published

LATENCY_COLUMNS = ("source", "gpu", "model", "q", "seconds", "relative")
GPU_PREDICTION_COLUMNS = ("gpu", "model", "config", "compression", "step_tokens", "lat1_s", "latq_s", "speedup",
                          "fits_memory")

# Llama-2 shapes for the roofline model: parameters, layers, attention width (heads x head dim).
MODEL_SHAPES = {
    "7B": dict(params=6.74e9, n_layers=32, kv_dim=4096),
    "13B": dict(params=13.0e9, n_layers=40, kv_dim=5120),
    "70B": dict(params=69.0e9, n_layers=80, kv_dim=8192),
}


def roofline_latency(params: float, q: int, context_len: int, gpu_row: Mapping[str, float], dtype_bytes: float = 2,
                     n_layers: int = 0, kv_dim: int = 0) -> float:
    """Roofline lower bound (seconds) of one forward of q tokens over `context_len` cached tokens.

    gpu_row: "peak_tflops" (dense fp16/bf16 TFLOP/s) and "bandwidth_gbs" (memory GB/s), e.g. a row of
    data/gpus.csv. FLOPs = 2 params q + 4 n_layers kv_dim q (context_len + q) (attention scores and values);
    bytes = params dtype_bytes (weights, read once per step) + 2 n_layers kv_dim (context_len + q) dtype_bytes
    (the KV cache). kv_dim: the model width (n_heads x head_dim; 0 ignores attention).
    """
    flops = 2 * params * q + 4 * n_layers * kv_dim * q * (context_len + q)
    bytes_moved = params * dtype_bytes + 2 * n_layers * kv_dim * (context_len + q) * dtype_bytes
    return max(flops / (gpu_row["peak_tflops"] * 1e12), bytes_moved / (gpu_row["bandwidth_gbs"] * 1e9))


def predicted_speedup(compression: float, lat1: float, latq: float) -> float:
    """Tokens/s of lookahead over plain decoding: compression x latency(1 token) / latency(q tokens)."""
    return compression * lat1 / latq


def gpu_table() -> pd.DataFrame:
    """data/gpus.csv with the roofline keys `peak_tflops` (dense fp16 tensor) and `bandwidth_gbs`."""
    gpus = pd.read_csv(GPUS_CSV)
    gpus["peak_tflops"] = gpus["fp16_tensor_tflops_dense"]
    gpus["bandwidth_gbs"] = gpus["memory_bandwidth_gbs"]
    return gpus


def measured_latency(model, qs: Sequence[int], context: int, repeats: int) -> pd.DataFrame:
    """latency(q) of one forward of q tokens on the model's own device (lade.cost.measure_latency)."""
    profile = measure_latency(model, qs=tuple(qs), context=context, repeats=repeats)
    seconds = np.asarray(profile.seconds)
    return pd.DataFrame({"source": "measured", "gpu": "this device", "model": "",
                         "q": list(profile.qs), "seconds": seconds, "relative": seconds / seconds[0]})


def _effective(gpu: Mapping[str, Any], flop_efficiency: float, bandwidth_efficiency: float) -> dict[str, float]:
    return {"peak_tflops": float(gpu["peak_tflops"]) * flop_efficiency,
            "bandwidth_gbs": float(gpu["bandwidth_gbs"]) * bandwidth_efficiency}


def roofline_curves(gpus: pd.DataFrame, models: Sequence[str], qs: Sequence[int], context: int,
                    flop_efficiency: float, bandwidth_efficiency: float) -> pd.DataFrame:
    """Modelled latency(q) per GPU class and model size (roofline_latency at achieved efficiency)."""
    rows = []
    for _, gpu in gpus.iterrows():
        row = _effective(gpu, flop_efficiency, bandwidth_efficiency)
        for name in models:
            shape = MODEL_SHAPES[name]
            lat = [roofline_latency(shape["params"], q, context, row, 2, shape["n_layers"], shape["kv_dim"])
                   for q in qs]
            rows += [{"source": "roofline", "gpu": gpu["gpu"], "model": name, "q": q, "seconds": s,
                      "relative": s / lat[0]} for q, s in zip(qs, lat)]
    return pd.DataFrame(rows, columns=list(LATENCY_COLUMNS))


def predict_gpu_speedups(configs: pd.DataFrame, gpus: pd.DataFrame, models: Sequence[str], context: int,
                         flop_efficiency: float, bandwidth_efficiency: float, full_steps: bool = True) -> pd.DataFrame:
    """Predicted speedup = compression x latency(1) / latency(step tokens) per GPU class, model size and config.

    configs: rows with `config`, `compression`, `step_tokens` (e.g. `scaling_table` of a measured run).
    fits_memory: the fp16 weights fit in one GPU's memory. full_steps: price every step at its full size
    1 + (W + G)(N - 1) (a warm n-gram pool, as in long generations) instead of the measured mean step size
    (short runs start with an empty pool and feed fewer guesses).
    """
    rows = []
    for _, gpu in gpus.iterrows():
        row = _effective(gpu, flop_efficiency, bandwidth_efficiency)
        for name in models:
            shape = MODEL_SHAPES[name]
            lat1 = roofline_latency(shape["params"], 1, context, row, 2, shape["n_layers"], shape["kv_dim"])
            for _, c in configs.iterrows():
                q = 1 + (c["W"] + c["G"]) * (c["N"] - 1) if full_steps else c["step_tokens"]
                latq = roofline_latency(shape["params"], int(round(q)), context, row, 2, shape["n_layers"],
                                        shape["kv_dim"])
                rows.append({"gpu": gpu["gpu"], "model": name, "config": c["config"],
                             "compression": c["compression"], "step_tokens": q, "lat1_s": lat1,
                             "latq_s": latq, "speedup": predicted_speedup(c["compression"], lat1, latq),
                             "fits_memory": shape["params"] * 2 / 1e9 < float(gpu["memory_gb"])})
    return pd.DataFrame(rows, columns=list(GPU_PREDICTION_COLUMNS))


def best_configs(predictions: pd.DataFrame) -> pd.DataFrame:
    """Per (GPU, model size): the config with the highest predicted speedup."""
    best = predictions.loc[predictions.groupby(["gpu", "model"], sort=False)["speedup"].idxmax()]
    return best.reset_index(drop=True)


def rtx3090_case(predictions: pd.DataFrame, default_config: str, tuned_config: str) -> pd.DataFrame:
    """Modelled 7B speedups on the RTX 3090 for the default and the tuned config, beside the reported ones."""
    reported = pd.read_csv(published("speedups"))
    reported = reported[(reported["hardware"] == "RTX 3090") & reported["method"].str.contains("parameters")]
    model = predictions[(predictions["gpu"] == "RTX 3090") & (predictions["model"] == "7B")].set_index("config")
    rows = []
    for label, config, pattern in (("default", default_config, "default"), ("tuned", tuned_config, "tuned")):
        r = model.loc[config]
        seen = reported[reported["method"].str.contains(pattern)]["speedup"]
        rows.append({"parameters": label, "config": config, "compression": r["compression"],
                     "step_tokens": r["step_tokens"], "latq_over_lat1": r["latq_s"] / r["lat1_s"],
                     "modelled_speedup": r["speedup"], "reported_speedup": float(seen.iloc[0]) if len(seen) else None})
    return pd.DataFrame(rows)
