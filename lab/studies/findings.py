"""The notebooks' Findings, computed from their results files: each claim with its number, 95% interval and n, and
what it means ("faster", "slower", "inconclusive" where the interval covers 1, raw points where n < 5), so no
number in a notebook's prose is typed by hand. One function per notebook; each returns markdown."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from lab.harness.claims import MIN_INTERVAL, Claim, table
from lab.harness.methods import reference_method
from lab.harness.provenance import commit_label
from lab.harness.results import load_results
from lab.harness.stats import SEED, summarize_runs
from lab.studies import findings_claims as fc
from lab.studies.experiments import ablation_methods, ablation_table, scaling_table, speedup_summary, total_variation
from lab.studies.figures_run import noise_band

RESAMPLES = 1000


def verdict(value: float, low: float, high: float, n: int, above: str = "faster than greedy",
            below: str = "slower than greedy", raw: Sequence[float] = (), unit: str = "prompts") -> str:
    """'1.26x [1.19, 1.35], n=40: faster than greedy' and the like; raw points instead of an interval when n < 5
    (n counts `unit`: prompts, or batches)."""
    if n < MIN_INTERVAL:
        points = ", ".join(f"{v:.2f}" for v in raw)
        return f"{value:.2f}x, n={n} (single {unit}: {points}): too few {unit} for an interval, no conclusion"
    meaning = "inconclusive (the interval covers 1)" if low <= 1.0 <= high else above if low > 1.0 else below
    return f"{value:.2f}x [{low:.2f}, {high:.2f}], n={n}: {meaning}"


def _methods(rows: pd.DataFrame, summary: pd.DataFrame, column: str = "speedup",
             reference: str = "greedy") -> list[str]:
    lines = []
    for r in summary[summary["method"] != reference].itertuples():
        raw = rows.loc[(rows["method"] == r.method) & (rows["prompt_set"] == r.prompt_set), column]
        text = verdict(getattr(r, column), getattr(r, f"{column}_low"), getattr(r, f"{column}_high"), int(r.prompts),
                       f"faster than {reference}", f"slower than {reference}", raw=raw)
        lines.append(f"- {r.prompt_set}, **{r.method}**: speedup {text}; compression {r.compression:.2f}")
    return lines


SPEEDUP = ("speedup is the ratio of total times over the prompts each method ran, paired with {0} on each, with a "
           "95% bootstrap interval where n >= 5.")


def _header(path: Path, rows: pd.DataFrame, note: str = SPEEDUP.format("greedy"),
            claims: Sequence[Claim] = ()) -> list[str]:
    """The findings' opening: heading, the claims table (lab.harness.claims), then where the numbers come from."""
    prov = rows.attrs.get("provenance", {})
    source = f"commit {commit_label(prov)}, {prov.get('device', 'unknown device')}"
    return ["## Findings", "", table(claims), "", f"From `{path.name}` ({source}); {note}", ""]


def speedups(path: Path) -> str:
    """Notebooks 01, 02 and 07: every method's speedup over greedy per prompt set."""
    rows = load_results(path)
    lines = _header(path, rows, claims=fc.speedups(path)) + _methods(rows, speedup_summary(rows))
    agree = rows.groupby("method")["matches_greedy"].mean()
    lines += ["", "Outputs identical to greedy: " + ", ".join(f"{m} {v:.0%}" for m, v in agree.items()) + "."]
    return "\n".join(lines)


def _slope(rows: pd.DataFrame, n: int, seed: int = SEED) -> tuple[float, float, float, int]:
    """Compression gained per doubling of W (G = W) for N = n: least-squares slope over the configs, with a
    bootstrap interval over prompts (each resample keeps a prompt's runs of every config together)."""
    part = rows[rows["config"].str.match(rf"^{n},\d+,\d+$")].copy()
    part["W"] = part["config"].str.split(",").str[1].astype(int)
    part["prompt"] = part["prompt_set"] + "/" + part["prompt_id"].astype(str)
    tokens = part.pivot_table(index="prompt", columns="W", values="new_tokens", aggfunc="sum")
    calls = part.pivot_table(index="prompt", columns="W", values="forward_calls", aggfunc="sum")
    x = np.log2(tokens.columns.to_numpy(float))

    def slope(index: np.ndarray) -> float:
        return float(np.polyfit(x, tokens.iloc[index].sum().to_numpy() / calls.iloc[index].sum().to_numpy(), 1)[0])

    rng = np.random.default_rng(seed)
    draws = [slope(rng.integers(0, len(tokens), len(tokens))) for _ in range(RESAMPLES)]
    low, high = np.quantile(draws, [0.025, 0.975])
    return slope(np.arange(len(tokens))), float(low), float(high), len(tokens)


def scaling(path: Path) -> str:
    """Notebook 03: compression per doubling of W for each N, with its interval."""
    rows = load_results(path)
    configs = scaling_table(rows, rows.attrs.get("provenance", {}).get("params", {}).get("params_count", 1))
    slopes = [(int(n), *_slope(rows, int(n))) for n in sorted(configs["N"].unique())]
    lines = _header(path, rows, "compression is new tokens per forward over all prompts of a config; the slope's "
                    "95% interval resamples prompts.", fc.scaling(path, slopes))
    for n, value, low, high, count in slopes:
        if count < MIN_INTERVAL:
            lines.append(f"- N={int(n)}: compression per doubling of W = G: {value:+.3f}, n={count} prompts: too few "
                         "prompts for an interval, no conclusion")
            continue
        meaning = ("inconclusive (the interval covers 0)" if low <= 0 <= high else
                   "compression grows with log W, as the scaling law says" if low > 0 else "compression falls with W")
        lines.append(f"- N={int(n)}: compression per doubling of W = G: {value:+.3f} [{low:+.3f}, {high:+.3f}], "
                     f"n={count} prompts: {meaning}")
    return "\n".join(lines)


def cost_model(calibration_path: Path, validation_path: Path, predictions_path: Path | None = None) -> str:
    """Notebook 04: the calibration's leave-one-out error and the validation on this device; with
    `predictions_path`, the GPU classes' predictions in the claims, labelled as the model's."""
    loo = load_results(calibration_path)
    valid = load_results(validation_path)
    lines = _header(calibration_path, loo, "each published value predicted by a fit without it (leave-one-out); "
                    "every GPU-class number is the cost model's prediction, none was measured.",
                    fc.cost_model(calibration_path, validation_path, predictions_path))
    for kinds in (("speedup", "compression"), ("baseline",)):
        error = loo.loc[loo["kind"].isin(kinds), "error_loo"].abs()
        lines.append(f"- {' and '.join(kinds)}: median |leave-one-out error| {100 * error.median():.0f}%, worst "
                     f"{100 * error.max():.0f}%, n={len(error)} published values")
    error = valid["error"].abs()
    lines.append(f"- this device: median |error| of the predicted speedup {100 * error.median():.1f}%, worst "
                 f"{100 * error.max():.1f}%, n={len(error)} measured (config, prompt set) runs")
    return "\n".join(lines)


def sampling(path: Path, distribution_path: Path, check_path: Path | None = None) -> str:
    """Notebook 05: lookahead sampling's speedup per temperature, the per-position distribution check and, with
    `check_path`, the losslessness check with power (lab.studies.sampling_check)."""
    from lab.studies import sampling_check

    rows = load_results(path)
    claims = fc.sampling(path) + (fc.sampling_check(check_path) if check_path is not None else [])
    lines = _header(path, rows, SPEEDUP.format("plain sampling"), claims)
    summary = summarize_runs(rows, reference="plain", keys=("temperature", "method"))
    for r in summary[summary["method"] == "lade"].itertuples():
        raw = rows.loc[(rows["method"] == "lade") & (rows["temperature"] == r.temperature), "speedup"]
        text = verdict(r.speedup, r.speedup_low, r.speedup_high, int(r.prompts), "faster than plain sampling",
                       "slower than plain sampling", raw)
        lines.append(f"- T={r.temperature:g}: speedup {text}; compression {r.compression:.2f}")
    dist = load_results(distribution_path)
    band = noise_band(dist).set_index("position")
    tv = total_variation(dist)
    lade = tv[tv["sampler"] == "lade"].set_index("position")["tv_distance"]
    inside = int(((lade <= band["high"].reindex(lade.index))).sum())
    lines.append(f"- distribution check: lade's total-variation distance to plain sampling is within the "
                 f"sampling-noise band (at or below its 97.5% quantile) at {inside} of {len(lade)} positions, "
                 f"n={int((dist['sampler'] == 'lade').sum() / max(len(lade), 1))} samples per sampler; an "
                 "occasional position above it is expected by chance")
    if check_path is not None:
        lines += ["", f"Losslessness check with power (`{check_path.name}`; joint G-test over the whole continuation, "
                  "Bonferroni within each family):"] + sampling_check.findings(load_results(check_path))
    return "\n".join(lines)


def ablation(path: Path) -> str:
    """Notebook 06: each ablation variant's speedup and compression."""
    rows = load_results(path)
    variants = ablation_methods(int(rows.attrs.get("provenance", {}).get("params", {}).get("ngram_size", 5)))
    found = ablation_table(rows, variants)
    lines = _header(path, rows, claims=fc.ablation(path, found, rows))
    for r in found.itertuples():
        raw = rows.loc[rows["method"] == r.method, "speedup"]
        speedup = verdict(r.speedup, r.speedup_low, r.speedup_high, int(r.prompts), raw=raw)
        lines.append(f"- **{r.variant}**: speedup {speedup}; "
                     f"compression {r.compression:.2f}")
    return "\n".join(lines)


def spec_bench(path: Path, per_task: bool = False) -> str:
    """Notebooks 07 and 08: every method's speedup over its reference (plain greedy, or plain beam search) over the
    six tasks pooled, and with `per_task` per task too."""
    rows = load_results(path)
    reference = reference_method(rows["method"])
    pooled = fc.pooled_spec_bench(rows)
    lines = _header(path, rows, SPEEDUP.format(reference), fc.spec_bench(path)) + _methods(
        pooled, speedup_summary(pooled), reference=reference)
    lines += _beam_split(pooled)
    if per_task:
        lines += ["", "Per task:"] + _methods(rows, speedup_summary(rows), reference=reference)
    return "\n".join(lines)


def _beam_split(pooled: pd.DataFrame) -> list[str]:
    """Notebook 08: the beam loop's gain (lade's loop with no drafts over plain beam search) apart from drafting's
    (lade-auto over that loop), tasks pooled; nothing where the run lacks either method."""
    drafting = fc.drafting_gain(pooled)
    if drafting is None:
        return []
    reference = reference_method(pooled["method"])
    loop = speedup_summary(pooled).set_index("method").loc[fc.LOOP]
    raw = pooled.loc[pooled["method"] == fc.LOOP, "speedup"]
    r, ratios = drafting
    return ["", "Where the gain comes from (tasks pooled):",
            f"- the beam loop alone (lade's cache layout and loop, no drafts; {fc.LOOP}) over {reference}: "
            + verdict(loop.speedup, loop.speedup_low, loop.speedup_high, int(loop.prompts), f"faster than {reference}",
                      f"slower than {reference}", raw),
            f"- drafting alone ({fc.AUTO} over {fc.LOOP}, same loop): "
            + verdict(r.speedup, r.speedup_low, r.speedup_high, int(r.n), "drafting pays", "drafting costs time",
                      ratios)]


BATCH_NOTE = ("speedup is plain batched greedy's total time over the lade method's on the same batches (the throughput "
              "ratio), with a 95% bootstrap interval over batches where n >= 5; n counts batches; compression is new "
              "tokens per forward per row. lade keeps the KV cache in place where transformers' DynamicCache copies "
              "it at every step: part of each ratio is that copy, and all of it where compression is 1.00 (the call "
              "handed to transformers' loop over lade's cache; docs/benchmarks.md).")


def batches(path: Path, predictions_path: Path | None = None, model: str = "Llama-2-7B", task: str = "chat",
            headroom_path: Path | None = None) -> str:
    """Notebook 09: each lade method's throughput over plain batched greedy per batch size (every set pooled, then
    each set), its compression per row and tokens per forward, rows identical to plain; with `headroom_path`, what
    the rows' steps alone would give in padded and ragged batch steps (lab.studies.batch_headroom); with
    `predictions_path`,
    the cost model's GPU-class curve for `model` and `task`."""
    from lab.harness.batched import POOLED, REFERENCE, summarize_batches

    rows = load_results(path)
    summary = summarize_batches(rows)
    claims = fc.batches(path, summary, rows)
    if predictions_path is not None:
        calibration = predictions_path.with_name("calibration.csv")  # notebook 04's, beside the predictions
        loo = fc.loo_error(calibration) if calibration.exists() else "validation error: notebook 04 not run"
        claims += fc.batch_predictions(predictions_path, load_results(predictions_path), loo, model, task)
    lines = _header(path, rows, BATCH_NOTE, claims)
    for method in [m for m in dict.fromkeys(summary["method"]) if m != REFERENCE]:
        mine = summary[summary["method"] == method]
        lines.append(f"**{method}** ({mine['config'].iloc[0]}) against plain batched greedy:")
        for size, part in mine.groupby("batch_size", sort=True):
            pooled = part[part["prompt_set"] == POOLED].iloc[0]
            raw = rows.loc[(rows["method"] == method) & (rows["batch_size"] == size), "speedup"]
            text = verdict(pooled.speedup, pooled.speedup_low, pooled.speedup_high, int(pooled.batches),
                           "faster than plain batched greedy", "slower than plain batched greedy", raw, "batches")
            sets = ", ".join(f"{r.prompt_set} {r.speedup:.2f}x (n={int(r.batches)})"
                             for r in part[part["prompt_set"] != POOLED].itertuples())
            lines.append(f"- batch {int(size)}: all sets {text}; {sets}; compression per row "
                         f"{pooled.compression:.2f}, tokens computed per forward {pooled.step_tokens:.1f} "
                         f"({pooled.row_width:.2f} per row; a plain batched step: {int(size)}), plain steps "
                         f"{pooled.plain_steps:.0%}, draft nodes per row and step {pooled.draft_nodes:.2f}")
    lade_rows = rows[rows["method"] != REFERENCE]
    lines.append(f"\nRows identical to plain batched greedy: {int(lade_rows['rows_identical'].sum())} of "
                 f"{int(lade_rows['rows'].sum())}.")
    if headroom_path is not None:
        lines += ["", _headroom(load_results(headroom_path))]
    if predictions_path is not None:
        lines += ["", _batch_predictions(load_results(predictions_path), model, task)]
    return "\n".join(lines)


def _headroom(table: pd.DataFrame) -> str:
    """Per method and batch size: drafting as alone in padded and ragged batch steps, and the pricing checked against
    lade's own measured steps (lab.studies.batch_headroom)."""
    from lab.studies.batch_headroom import summarize_headroom

    missing = table.attrs.get("provenance", {}).get("params", {}).get("missing")
    if missing:
        return f"No replay of the batches from their rows alone: {missing}."
    lines = ["Each batch replayed from its rows' steps alone (the tokens each fed per forward at batch 1), priced by "
             "notebook 04's latency profile at the tokens a step feeds in all (decode steps, no host work), over plain "
             "batched greedy priced alike:"]
    for r in summarize_headroom(table).itertuples():
        raw = table[(table["batch_size"] == r.batch_size) & (table["method"] == r.method)]
        padded, ragged, modelled = (
            verdict(getattr(r, name), getattr(r, f"{name}_low"), getattr(r, f"{name}_high"), int(r.batches),
                    "above plain batched greedy", "below plain batched greedy", raw[name], "batches")
            for name in ("padded", "ragged", "modelled"))
        lines.append(f"- {r.method}, batch {int(r.batch_size)}: padded steps (as lade feeds a batch) {padded}; "
                     f"ragged steps (each row's own tokens) {ragged}; the same pricing of lade's measured steps "
                     f"{modelled}, measured {r.measured:.2f}x (median over batches)")
    return "\n".join(lines)


def _batch_predictions(curve: pd.DataFrame, model: str, task: str) -> str:
    """Per GPU class: the batch-1 config's modelled ratio at the smallest and largest batch size, and the largest batch
    size at which a batch-aware choice still drafts."""
    part = curve[(curve["model"] == model) & (curve["task"] == task)]
    if part.empty:
        return f"No cost-model prediction for {model} ({task}): its weights fit no GPU class of the predictions."
    sizes = sorted(part["batch_size"].unique())
    lines = [f"Cost model (notebook 04's calibration; {model}, {task}; each batch priced by its slowest row; 95% band "
             "from the calibration error):"]
    for gpu, rows in part.groupby("gpu", sort=False):
        fixed = rows[rows["choice"] == "fixed"].set_index("batch_size")
        aware = rows[(rows["choice"] == "batch-aware") & (rows["config"] != "plain")]
        first, last = fixed.loc[sizes[0]], fixed.loc[sizes[-1]]
        drafts = f"drafts up to batch {int(aware['batch_size'].max())}" if len(aware) else "never drafts"
        lines.append(f"- {gpu}: {first.config} modelled {first.speedup:.2f}x [{first.speedup_low:.2f}, "
                     f"{first.speedup_high:.2f}] at batch {sizes[0]}, {last.speedup:.2f}x [{last.speedup_low:.2f}, "
                     f"{last.speedup_high:.2f}] at batch {sizes[-1]}; a batch-aware choice {drafts}")
    return "\n".join(lines)


def corpus(path: Path) -> str:
    """Notebook 10: lade auto with a corpus against greedy, per Spec-Bench task and corpus size, pooled over the
    tasks, and on two-turn MT-Bench."""
    rows = load_results(path)
    lines = _header(path, rows, claims=fc.corpus(path))
    spec = rows[rows["workload"] == "spec_bench"]
    pooled = spec.assign(prompt_id=spec["prompt_set"] + "/" + spec["prompt_id"].astype(str),
                         prompt_set="spec_bench (tasks pooled)")
    for part in (pooled, spec, rows[rows["workload"] == "two_turns"]):
        lines += _methods(part, speedup_summary(part))
    return "\n".join(lines)
