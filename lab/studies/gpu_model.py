"""Calibrated predictions for GPU classes (notebook 04): latency curves, the speedup of each configuration per GPU
class, model and task with its uncertainty, the recommended configuration, and the RTX 3090 case.

The cost model is lab.harness.costmodel, its parameters come from lab.studies.calibration; the compression of each
configuration is the one measured here (this notebook's runs) scaled to the published level of the task
(calibration's `a` for MT-Bench and HumanEval). Uncertainty: a prediction's log error is taken as normal with the
GPU class's standard deviation from calibration.class_sigma (leave-one-out or transfer error), so its 95% band is
speedup x exp(+-1.96 sigma).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from lab.harness import costmodel as cm
from lab.harness.bench import summarize
from lab.harness.methods import parse_config
from lab.harness.stats import Z95
from lab.studies import calibration as cal
from lade.config import LookaheadConfig
from lade.cost import step_latency

LATENCY_COLUMNS = ("source", "gpu", "model", "q", "seconds", "relative", "relative_low", "relative_high")
GPU_PREDICTION_COLUMNS = ("gpu", "model", "task", "config", "compression", "step_tokens", "single_share", "lat1_s",
                          "step_s", "speedup", "speedup_low", "speedup_high", "sigma", "sigma_source", "fits_memory",
                          "published_speedup", "published_point")
TASK_DATASET = {"chat": "MT-Bench", "code": "HumanEval"}  # the published level each task is scaled to
TASK_OF_SET = {"mt_bench": "chat", "humaneval": "code"}
MODELS = ("Llama-2-7B", "Llama-2-13B", "CodeLlama-34B", "Llama-2-70B")


def reference_compression(rows: pd.DataFrame) -> pd.DataFrame:
    """Per task and config, the compression measured here (token-weighted, with 95% interval) and the step mix:
    benchmark rows of mt_bench (chat) and humaneval (code)."""
    summary = summarize(rows[rows["prompt_set"].isin(list(TASK_OF_SET))])
    out = summary[(summary["config"] != "") & (summary["config"] != "plain")].copy()
    if out.empty:
        raise ValueError(f"no lookahead rows of the prompt sets {sorted(TASK_OF_SET)}")
    out["task"] = out["prompt_set"].map(TASK_OF_SET)
    keys = [parse_config(c) for c in out["config"]]
    out["N"], out["W"], out["G"] = ([k[i] for k in keys] for i in range(3))
    return out[["task", "config", "N", "W", "G", "prompts", "compression", "compression_low", "compression_high",
                "step_tokens", "single_token_steps"]].reset_index(drop=True)


def step_mix(row: Mapping, full_steps: bool) -> tuple[float, float]:
    """(mean tokens per step, share of one-token steps) of a config: measured, or with every step that is not a
    one-token step at its full size 1 + (W + G)(N - 1) (a warm pool, as in long generations)."""
    single = float(row["single_token_steps"])
    if not full_steps:
        return float(row["step_tokens"]), single
    wide = LookaheadConfig.from_key((int(row["N"]), int(row["W"]), int(row["G"]))).max_step_tokens()
    return single + (1.0 - single) * wide, single


def latency_curves(fit: cal.Fit, sigma: Mapping[str, float], models: Sequence[str], qs: Sequence[int],
                   context: float = cm.CONTEXT) -> pd.DataFrame:
    """Modelled cost of a q-token lookahead step relative to a plain step, (latency(q) + host_s) / latency(1)
    (latency(q) / latency(1) at q = 1), per GPU class and model, with the class's 95% band."""
    rows = []
    for name, g in cm.gpus().items():
        p = fit.params(name)
        for model in models:
            s = cm.shape(model)
            lat = cm.latency(s, g, p, np.asarray(qs, dtype=float), context)
            relative = (lat + np.where(np.asarray(qs) > 1, p.host_s, 0.0)) / lat[0]
            band = np.exp(Z95 * sigma[name] * (np.asarray(qs) > 1))
            rows += [{"source": "modelled", "gpu": name, "model": model, "q": q, "seconds": t, "relative": r,
                      "relative_low": r / b, "relative_high": r * b} for q, t, r, b in zip(qs, lat, relative, band)]
    return pd.DataFrame(rows, columns=list(LATENCY_COLUMNS))


def published_step_costs(obs: pd.DataFrame) -> pd.DataFrame:
    """Published step costs relative to a plain step, compression / speedup at the config's full step size, for
    observations whose compression is published (these need no compression estimate)."""
    known = obs[(obs["kind"] == "speedup") & obs["compression"].notna()].copy()
    known["q"] = [LookaheadConfig.from_label(c).max_step_tokens() for c in known["config"]]
    known["relative"] = known["compression"] / known["published"]
    return known[["point", "gpu", "shape", "config", "attention", "q", "relative", "source", "location"]]


def predict_grid(fit: cal.Fit, sigma: Mapping[str, float], reference: pd.DataFrame, obs: pd.DataFrame,
                 models: Sequence[str] = MODELS, full_steps: bool = True,
                 context: float = cm.CONTEXT) -> pd.DataFrame:
    """Predicted speedup of every measured config per GPU class, model and task (columns GPU_PREDICTION_COLUMNS),
    priced with the default implementation's host_s; published speedups of the same cell alongside. obs: the
    calibration table (calibration.leave_one_out)."""
    ref = cal.compression_lookup(reference)
    pub = obs[obs["kind"] == "speedup"]
    measured = cal.measured_classes(obs)
    rows = []
    for name, g in cm.gpus().items():
        p = fit.params(name)
        for model in models:
            s = cm.shape(model)
            lat = lambda q, s=s, g=g, p=p: float(cm.latency(s, g, p, q, context))
            for r in reference.itertuples():
                dataset = TASK_DATASET[r.task]
                c = fit.compression(dataset, r.config, ref) if dataset in fit.a else float(r.compression)
                q, single = step_mix(r._asdict(), full_steps)
                speed = cm.speedup(c, lat, q, single, p.host_s)
                twin = pub[(pub["gpu"] == name) & (pub["shape"] == model) & (pub["config"] == r.config)
                           & (pub["dataset"] == dataset)]
                band = np.exp(Z95 * sigma[name])
                rows.append({"gpu": name, "model": model, "task": r.task, "config": r.config, "compression": c,
                             "step_tokens": q, "single_share": single, "lat1_s": lat(1),
                             "step_s": step_latency(lat, q, single), "speedup": speed,
                             "speedup_low": speed / band, "speedup_high": speed * band, "sigma": sigma[name],
                             "sigma_source": "leave-one-out" if name in measured else "transfer",
                             "fits_memory": cm.fits(s, g),
                             "published_speedup": twin["published"].iloc[0] if len(twin) else np.nan,
                             "published_point": twin["point"].iloc[0] if len(twin) else ""})
    return pd.DataFrame(rows, columns=list(GPU_PREDICTION_COLUMNS))


def best_configs(predictions: pd.DataFrame) -> pd.DataFrame:
    """Per (GPU, model, task) where the weights fit: the config with the highest predicted speedup, and the verdict:
    'pays' if its 95% band lies above 1, 'loses' (use plain decoding) if below, else 'uncertain'."""
    fitting = predictions[predictions["fits_memory"]]
    best = fitting.loc[fitting.groupby(["gpu", "model", "task"], sort=False)["speedup"].idxmax()].copy()
    best["verdict"] = np.select([best["speedup_low"] > 1, best["speedup_high"] < 1], ["pays", "loses"], "uncertain")
    return best[["gpu", "model", "task", "config", "compression", "step_tokens", "speedup", "speedup_low",
                 "speedup_high", "verdict"]].reset_index(drop=True)


def gpu_case(loo: pd.DataFrame, gpu: str, sigma: float) -> pd.DataFrame:
    """A GPU class's published speedups beside the model's leave-one-out predictions (fitted without that point),
    with 95% bands."""
    rows = loo[(loo["gpu"] == gpu) & (loo["kind"] == "speedup")].copy()
    band = np.exp(Z95 * sigma)
    rows["predicted_low"] = rows["predicted_loo"] / band
    rows["predicted_high"] = rows["predicted_loo"] * band
    rows["step_tokens"] = [LookaheadConfig.from_label(c).max_step_tokens() for c in rows["config"]]
    return rows[["point", "dataset", "config", "step_tokens", "compression_used", "published", "predicted_loo",
                 "predicted_low", "predicted_high", "error_loo", "source", "url"]].reset_index(drop=True)


def when_it_pays(best: pd.DataFrame, loo: pd.DataFrame, task: str = "chat") -> str:
    """One paragraph from the recommendation table: per model, the GPU classes where its best config pays (95% band
    above 1), is uncertain, or loses, with the calibration's leave-one-out error."""
    speedups = loo[loo["kind"] == "speedup"]
    parts = [f"Calibrated on {len(loo)} published values ({len(speedups)} speedups; median |leave-one-out error| "
             f"{100 * speedups['error_loo'].abs().median():.0f}% on speedups), the model predicts for {task} "
             f"({TASK_DATASET[task]}-level compression):"]
    for model, rows in best[best["task"] == task].groupby("model", sort=False):
        verdicts = []
        for verdict in ("pays", "uncertain", "loses"):
            chosen = rows[rows["verdict"] == verdict]
            if len(chosen):
                cells = ", ".join(f"{r.gpu} ({r.config}: {r.speedup:.2f}x, {r.speedup_low:.2f}-{r.speedup_high:.2f})"
                                  for r in chosen.itertuples())
                verdicts.append(f"{verdict} on {cells}")
        parts.append(f"{model}: " + "; ".join(verdicts) + ".")
    return " ".join(parts)


BATCH_PREDICTION_COLUMNS = ("gpu", "model", "task", "batch_size", "choice", "config", "compression", "step_tokens",
                            "speedup", "speedup_low", "speedup_high", "sigma")


def predict_batches(fit: cal.Fit, sigma: Mapping[str, float], predictions: pd.DataFrame, batch_sizes: Sequence[int],
                    context: float = cm.CONTEXT) -> pd.DataFrame:
    """Predicted throughput of lookahead over plain batched decoding at each batch size, per GPU class, model and task
    where the weights fit (columns BATCH_PREDICTION_COLUMNS), from notebook 04's predictions (each config's
    compression and step mix, `predict_grid`), each batch priced by its slowest row (costmodel.batch_speedup). Two
    choices per batch size: "fixed", the config that is fastest at batch 1 kept at every batch size; "batch-aware",
    the fastest config at that batch size, or plain decoding (1x) where none is predicted to gain."""
    rows = []
    for (name, model, task), part in predictions[predictions["fits_memory"]].groupby(["gpu", "model", "task"],
                                                                                      sort=False):
        s, g, p = cm.shape(model), cm.gpu(name), fit.params(name)
        band = np.exp(Z95 * sigma[name])
        curves = {r.config: [cm.batch_speedup(s, g, p, b, r.compression, r.step_tokens, r.single_share, context)
                             for b in batch_sizes] for r in part.itertuples()}
        first = max(curves, key=lambda c: curves[c][0])
        by_config = part.set_index("config")
        for i, b in enumerate(batch_sizes):
            best = max(curves, key=lambda c: curves[c][i])
            choices = (("fixed", first, curves[first][i]),
                       ("batch-aware", best, curves[best][i]) if curves[best][i] > 1 else ("batch-aware", "plain", 1.0))
            for choice, config, speed in choices:
                plain = config == "plain"
                rows.append({"gpu": name, "model": model, "task": task, "batch_size": b, "choice": choice,
                             "config": config, "compression": 1.0 if plain else by_config.loc[config, "compression"],
                             "step_tokens": 1.0 if plain else by_config.loc[config, "step_tokens"], "speedup": speed,
                             "speedup_low": speed if plain else speed / band,
                             "speedup_high": speed if plain else speed * band, "sigma": sigma[name]})
    return pd.DataFrame(rows, columns=list(BATCH_PREDICTION_COLUMNS))
