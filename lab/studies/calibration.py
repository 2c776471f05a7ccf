"""Calibrating lab.harness.costmodel on published lookahead measurements (data/published/gpu_lookahead.csv), with
leave-one-out and transfer prediction errors (the calibrated predictions themselves: lab.studies.gpu_model).

Observations: every published speedup with a known configuration ("speedup"), every published plain-greedy
tokens/s ("baseline"), and every published compression of a dataset whose compression the model has to estimate
("compression"). Free parameters, fitted by least squares on log values (scipy.optimize.least_squares, with a weak
log-normal prior that only matters for a parameter no observation constrains):

- shared by all GPU classes (one software family, HF eager decoding): t_step, t_layer, bandwidth_eff, q_half;
- per implementation (the blog's 2023 code, the paper's FlashAttention version, Spec-Bench's copy): host_s;
- per GPU class with published speedups: flop_eff (a class without any takes the geometric mean of the fitted
  ones: the transfer rule whose error `transfer_error` measures);
- per dataset without a published compression: a, in compression = 1 + a x (c_ref(config) - 1), where c_ref is the
  compression measured here for the same configuration on the matching task ("chat" or "code"): the shape of the
  scaling law comes from our measurement, its level from the published speedups. A published compression is
  used as it is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from lab.harness import costmodel as cm
from lab.harness.paths import published
from lade.config import LookaheadConfig

TASK_OF_DATASET = {"MT-Bench": "chat", "CNN/DailyMail": "chat", "GSM8K": "chat", "HumanEval": "code"}
SHARED = ("t_step", "t_layer", "bandwidth_eff", "q_half")
PRIOR = {"t_step": 3e-3, "t_layer": 3e-4, "bandwidth_eff": 0.8, "q_half": 16.0, "host_s": 2e-3, "flop_eff": 0.5,
         "a": 1.5}
BOUNDS = {"t_step": (1e-5, 0.05), "t_layer": (1e-6, 5e-3), "bandwidth_eff": (0.2, 1.0), "q_half": (0.5, 512.0),
          "host_s": (1e-5, 0.05), "flop_eff": (0.02, 1.0), "a": (0.05, 20.0)}
DEFAULT_IMPLEMENTATION = "reference 2023 (HF eager)"  # whose host_s prices predictions for other GPU classes
PRIOR_SIGMA = np.log(4.0)  # prior: a factor of 4 either way at one standard deviation
DATA_SIGMA = 0.1  # scatter of a published value (log): numbers read off charts, "about 1.4x"
OBSERVATION_COLUMNS = ("point", "kind", "published", "gpu", "shape", "n_gpus", "dataset", "config",
                       "compression", "implementation", "attention", "source", "url", "location")
CALIBRATION_COLUMNS = OBSERVATION_COLUMNS + ("compression_used", "predicted", "predicted_loo", "error", "error_loo",
                                             "log_error_loo", "sigma_loo")


def load_published() -> pd.DataFrame:
    """data/published/gpu_lookahead.csv with its yes/no columns as booleans; rows the model can use are checked."""
    table = pd.read_csv(published("gpu_lookahead"), keep_default_na=False, na_values=[""])
    if bad := set(table["attention"]) - {"eager", "flash"}:
        raise ValueError(f"gpu_lookahead.csv: attention must be eager or flash, got {sorted(bad)}")
    for column in ("calibrate_speedup", "calibrate_baseline", "pool_from_prompt"):
        bad = ~table[column].isin(["yes", "no"])
        if bad.any():
            raise ValueError(f"gpu_lookahead.csv: {column} must be yes or no, got {table.loc[bad, column].tolist()}")
        table[column] = table[column] == "yes"
    used = table[table["calibrate_speedup"] | table["calibrate_baseline"]]
    for r in used.itertuples():
        cm.gpu(r.gpu), cm.shape(r.shape)  # clear errors for unknown names
        if r.calibrate_speedup and (pd.isna(r.ngram_size) or pd.isna(r.speedup)):
            raise ValueError(f"gpu_lookahead.csv: {r.point} is calibrated on its speedup but has no configuration")
    return table


def config_label(n: float, w: float, g: float) -> str:
    """The label of the lookahead config (N, W, G) of a published row (LookaheadConfig.label)."""
    return LookaheadConfig(window_size=int(w), ngram_size=int(n), guess_set_size=int(g)).label


def observations(table: pd.DataFrame) -> pd.DataFrame:
    """One row per calibration observation (columns OBSERVATION_COLUMNS)."""
    rows = []
    for r in table.itertuples():
        base = {"point": r.point, "gpu": r.gpu, "shape": r.shape, "n_gpus": int(r.n_gpus), "dataset": r.dataset,
                "implementation": r.implementation, "attention": r.attention, "source": r.source, "url": r.url,
                "location": r.location,
                "config": config_label(r.ngram_size, r.window_size, r.guess_set_size) if r.calibrate_speedup else "",
                "compression": r.compression}
        if r.calibrate_speedup:
            rows.append({**base, "kind": "speedup", "published": r.speedup})
            if pd.notna(r.compression) and r.dataset in TASK_OF_DATASET and not r.pool_from_prompt:
                rows.append({**base, "kind": "compression", "published": r.compression, "compression": np.nan})
        if r.calibrate_baseline:
            rows.append({**base, "kind": "baseline", "published": r.baseline_tok_s})
    return pd.DataFrame(rows, columns=list(OBSERVATION_COLUMNS))


def compression_lookup(table: pd.DataFrame) -> dict[tuple[str, str], float]:
    """(task, config) -> compression measured here (rows with task, config, compression)."""
    return {(r.task, r.config): float(r.compression) for r in table.itertuples()}


@dataclass(frozen=True)
class Fit:
    shared: dict[str, float]
    host_s: dict[str, float]  # implementation -> lookahead's per-step host work
    flop_eff: dict[str, float]  # GPU class -> fitted efficiency
    a: dict[str, float]  # dataset -> compression scale
    cost: float = float("nan")  # final least-squares cost (half the sum of squared residuals and prior terms)

    def params(self, gpu: str, implementation: str = DEFAULT_IMPLEMENTATION,
               attention: str = "eager") -> cm.LatencyParams:
        """Latency parameters of a GPU class (fitted, or by the transfer rule) under an implementation."""
        fitted = list(self.flop_eff.values())
        eff = self.flop_eff.get(gpu, float(np.exp(np.mean(np.log(fitted)))) if fitted else PRIOR["flop_eff"])
        host = self.host_s.get(implementation, self.host_s.get(DEFAULT_IMPLEMENTATION, PRIOR["host_s"]))
        return cm.LatencyParams(flop_eff=eff, host_s=host, eager_attention=attention == "eager", **self.shared)

    def compression(self, dataset: str, config: str, reference: Mapping[tuple[str, str], float]) -> float:
        task = TASK_OF_DATASET.get(dataset)
        if task is None or dataset not in self.a:
            raise ValueError(f"no compression estimate for dataset {dataset!r}")
        if (task, config) not in reference:
            raise ValueError(f"no measured {task} compression for config {config}: measure it (notebook 04 configs)")
        return 1.0 + self.a[dataset] * (reference[(task, config)] - 1.0)


def _compression(published_value: float, dataset: str, config: str, fit: Fit,
                 reference: Mapping[tuple[str, str], float]) -> float:
    """The compression a speedup observation is priced with: published, else estimated."""
    return published_value if pd.notna(published_value) else fit.compression(dataset, config, reference)


def predict(obs: pd.DataFrame, fit: Fit, reference: Mapping[tuple[str, str], float],
            context: float = cm.CONTEXT) -> np.ndarray:
    """The model's value of each observation: tokens/s, speedup or compression."""
    return _predict(_priced(obs), fit, reference, context)


def _priced(obs: pd.DataFrame) -> list[tuple]:
    """What pricing each observation needs, looked up once (a fit prices the same observations many times):
    (kind, shape, GPU class, implementation, attention, dataset, config, published compression, step tokens)."""
    return [(r.kind, cm.shape(r.shape), cm.gpu(r.gpu), r.implementation, r.attention, r.dataset, r.config,
             r.compression, LookaheadConfig.from_label(r.config).max_step_tokens() if r.kind == "speedup" else 0)
            for r in obs.itertuples()]


def _predict(priced: list[tuple], fit: Fit, reference: Mapping[tuple[str, str], float],
             context: float) -> np.ndarray:
    out = np.empty(len(priced))
    for i, (kind, s, g, implementation, attention, dataset, config, compression, q) in enumerate(priced):
        if kind == "compression":
            out[i] = fit.compression(dataset, config, reference)
            continue
        p = fit.params(g.name, implementation, attention)
        if kind == "baseline":
            out[i] = 1.0 / float(cm.latency(s, g, p, 1, context))
        else:
            c = _compression(compression, dataset, config, fit, reference)
            out[i] = cm.speedup(c, lambda x, s=s, g=g, p=p: cm.latency(s, g, p, x, context), q, 0.0, p.host_s)
    return out


def _layout(obs: pd.DataFrame, fixed: Mapping[str, float]) -> list[tuple[str, str]]:
    """Free parameters the observations constrain: (kind, name)."""
    speedups = obs[obs["kind"] == "speedup"]
    estimated = speedups[speedups["compression"].isna()]
    return ([("shared", k) for k in SHARED if k not in fixed]
            + [("host_s", i) for i in dict.fromkeys(speedups["implementation"])]
            + [("flop_eff", g) for g in dict.fromkeys(speedups["gpu"])]
            + [("a", d) for d in dict.fromkeys(estimated["dataset"])])


def _unpack(layout: list[tuple[str, str]], theta: np.ndarray, fixed: Mapping[str, float]) -> Fit:
    values = dict(zip(layout, np.exp(theta)))
    group = lambda kind: {n: float(v) for (k, n), v in values.items() if k == kind}  # noqa: E731
    return Fit({**group("shared"), **fixed}, group("host_s"), group("flop_eff"), group("a"))


def fit(obs: pd.DataFrame, reference: Mapping[tuple[str, str], float], context: float = cm.CONTEXT,
        fixed: Mapping[str, float] | None = None) -> Fit:
    """Least-squares fit of the log values of `obs` (plus the weak prior); `fixed` holds shared parameters at
    given values instead of fitting them."""
    if obs.empty:
        raise ValueError("no calibration observations")
    fixed = dict(fixed or {})
    if unknown := set(fixed) - set(SHARED):
        raise ValueError(f"only shared parameters {SHARED} can be fixed, got {sorted(unknown)}")
    layout = _layout(obs, fixed)
    prior = np.log([PRIOR[name if kind == "shared" else kind] for kind, name in layout])
    bounds = np.log([BOUNDS[name if kind == "shared" else kind] for kind, name in layout]).T
    published_log = np.log(obs["published"].to_numpy(float))
    priced = _priced(obs)

    def residuals(theta: np.ndarray) -> np.ndarray:
        model = _predict(priced, _unpack(layout, theta, fixed), reference, context)
        return np.concatenate([(np.log(model) - published_log) / DATA_SIGMA, (theta - prior) / PRIOR_SIGMA])

    result = least_squares(residuals, np.clip(prior, bounds[0] + 1e-9, bounds[1] - 1e-9), bounds=bounds)
    return replace(_unpack(layout, result.x, fixed), cost=float(result.cost))


def leave_one_out(obs: pd.DataFrame, reference: Mapping[tuple[str, str], float],
                  context: float = cm.CONTEXT) -> pd.DataFrame:
    """`obs` (columns CALIBRATION_COLUMNS) with `predicted` (fit on all) and `predicted_loo` (fit without that
    observation) and their relative errors; `log_error_loo` = log(predicted_loo / published); `compression_used` is
    the compression a speedup was priced with by the fit on all (published, else estimated)."""
    everything = fit(obs, reference, context)
    full = predict(obs, everything, reference, context)
    loo = np.empty(len(obs))
    for i in range(len(obs)):
        rest = obs.drop(index=obs.index[i])
        loo[i] = predict(obs.iloc[[i]], fit(rest, reference, context), reference, context)[0]
    out = obs.copy()
    out["compression_used"] = [_compression(r.compression, r.dataset, r.config, everything, reference)
                               if r.kind == "speedup" else np.nan for r in obs.itertuples()]
    out["predicted"] = full
    out["predicted_loo"] = loo
    out["error"] = full / out["published"] - 1
    out["error_loo"] = loo / out["published"] - 1
    out["log_error_loo"] = np.log(loo / out["published"])
    out = out.reset_index(drop=True)
    out["sigma_loo"] = _point_sigma(out)
    return out


def _rms(errors) -> float:
    errors = np.asarray(errors, dtype=float)
    return float(np.sqrt(np.mean(np.square(errors)))) if errors.size else float("nan")


def _point_sigma(loo: pd.DataFrame) -> np.ndarray:
    """Each observation's reported error (one standard deviation of its log): the RMS leave-one-out error of the
    observations of its kind, for speedups of its GPU class when that class is one of `measured_classes`."""
    measured = measured_classes(loo)
    by_kind = {kind: _rms(group["log_error_loo"]) for kind, group in loo.groupby("kind")}
    speedups = loo[loo["kind"] == "speedup"]
    by_class = {g: _rms(speedups.loc[speedups["gpu"] == g, "log_error_loo"]) for g in measured}
    return np.array([by_class[r.gpu] if r.kind == "speedup" and r.gpu in measured else by_kind[r.kind]
                     for r in loo.itertuples()])


def transfer_error(obs: pd.DataFrame, reference: Mapping[tuple[str, str], float], gpu: str,
                   context: float = cm.CONTEXT) -> pd.DataFrame:
    """`gpu`'s speedup observations predicted by a fit without any of that class's observations (its flop_eff by
    the transfer rule): what a GPU class with no published measurement should expect."""
    mine = obs[(obs["gpu"] == gpu) & (obs["kind"] == "speedup")]
    rest = obs[obs["gpu"] != gpu]
    rest_fit = fit(rest, reference, context)
    known = [d for d in mine["dataset"] if d in rest_fit.a or d not in TASK_OF_DATASET]
    mine = mine[mine["compression"].notna() | mine["dataset"].isin(known)]
    out = mine.copy()
    out["predicted_transfer"] = predict(mine, rest_fit, reference, context)
    out["log_error_transfer"] = np.log(out["predicted_transfer"] / out["published"])
    return out.reset_index(drop=True)


def measured_classes(loo: pd.DataFrame) -> set[str]:
    """GPU classes with at least two published speedups: their uncertainty is their own leave-one-out error."""
    counts = loo[loo["kind"] == "speedup"].groupby("gpu").size()
    return set(counts[counts >= 2].index)


def class_sigma(loo: pd.DataFrame, transfer: pd.DataFrame, gpus: Sequence[str]) -> dict[str, float]:
    """One standard deviation of log(predicted / true speedup) per GPU class: its speedups' `sigma_loo` for
    `measured_classes`; otherwise (a class the published record does not measure) the larger of the RMS transfer
    error and the RMS leave-one-out error of all speedups."""
    speedups = loo[loo["kind"] == "speedup"]
    unmeasured = float(np.nanmax([_rms(transfer["log_error_transfer"]), _rms(speedups["log_error_loo"])]))
    own = speedups.groupby("gpu")["sigma_loo"].first()
    measured = measured_classes(loo)
    return {g: float(own[g]) if g in measured else unmeasured for g in gpus}
