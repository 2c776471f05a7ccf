"""The claims table of each notebook (lab.harness.claims), computed from its results files: one function per
notebook, each returning its claims; lab.studies.findings renders them at the top of the notebook's findings and
lab.pipeline.readme draws the README's from the same functions."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from lab.harness.claims import MEASURED, MODELLED, PUBLISHED, Claim, evidence, verdict
from lab.harness.methods import reference_method
from lab.harness.results import load_results
from lab.harness.stats import summarize_runs
from lab.studies.experiments import speedup_summary


def _speedup_claim(source: str, label: str, r, raw, reference: str, unit: str = "prompts") -> Claim:
    text = verdict(r.speedup, r.speedup_low, r.speedup_high, int(r.n), f"faster than {reference}",
                   f"slower than {reference}")
    return Claim(f"{label}: {text}", evidence(source, int(r.n), r.speedup, r.speedup_low, r.speedup_high, raw, unit)
                 + f"; compression {r.compression:.2f}", MEASURED)


def method_claims(rows: pd.DataFrame, source: str, reference: str | None = None) -> list[Claim]:
    """Each method's speedup over the reference (plain greedy or plain beam search) per prompt set."""
    reference = reference or reference_method(rows["method"])
    claims = []
    summary = speedup_summary(rows).rename(columns={"prompts": "n"})
    for r in summary[summary["method"] != reference].itertuples():
        raw = rows.loc[(rows["method"] == r.method) & (rows["prompt_set"] == r.prompt_set), "speedup"]
        claims.append(_speedup_claim(source, f"{r.method} on {r.prompt_set}", r, raw, reference))
    exact = rows[rows["method"] != reference]
    if "matches_greedy" in exact and len(exact):
        same = int(exact["matches_greedy"].sum())
        claims.append(Claim(f"outputs identical to {reference}", f"`{source}`, {same} of {len(exact)} runs",
                            MEASURED))
    return claims


def speedups(path: Path) -> list[Claim]:
    """Notebooks 01, 02 and 07."""
    return method_claims(load_results(path), path.name)


def pooled_spec_bench(rows: pd.DataFrame) -> pd.DataFrame:
    """Spec-Bench rows with the six tasks pooled into one prompt set (prompt ids made unique per task)."""
    pooled = rows.assign(prompt_id=rows["prompt_set"] + "/" + rows["prompt_id"].astype(str), prompt_set="spec_bench")
    pooled.attrs = rows.attrs
    return pooled


def spec_bench(path: Path) -> list[Claim]:
    """Notebooks 07 and 08, tasks pooled; for beam search (notebook 08) the beam loop's gain (lade's loop with no
    drafts over plain beam search) apart from drafting's (lade-auto over lade's loop with no drafts)."""
    rows = pooled_spec_bench(load_results(path))
    claims = method_claims(rows, path.name)
    drafting = drafting_gain(rows)
    if drafting is not None:
        claims.append(_speedup_claim(path.name, f"drafting alone ({AUTO} over lade's loop without drafts)",
                                     *drafting, "lade's loop without drafts"))
    return claims


LOOP, AUTO = "lade(plain)", "lade-auto"  # notebook 08: lade's beam loop with no drafts, and with auto's drafts


def drafting_gain(rows: pd.DataFrame) -> tuple | None:
    """Drafting's own gain in a beam-search run: lade-auto's speedup over lade's loop with no drafts, paired per
    prompt -> (summary row with n, per-prompt ratios), or None where the run has not both methods."""
    if not {LOOP, AUTO} <= set(rows["method"]):
        return None
    part = rows[rows["method"].isin([LOOP, AUTO])]
    r = summarize_runs(part, reference=LOOP).rename(columns={"prompts": "n"}).iloc[0]
    wall = part.set_index(["prompt_id", "method"])["wall_s"].unstack()
    return r, (wall[LOOP] / wall[AUTO]).to_numpy()


def scaling(path: Path, slopes: list[tuple[int, float, float, float, int]]) -> list[Claim]:
    """Notebook 03: per N, whether compression grows with log W (slopes: N, slope, low, high, prompts); the scaling
    law is claimed only where the slope's interval lies above 0."""
    claims = []
    for n, value, low, high, count in slopes:
        text = verdict(value, low, high, count, "compression grows with log W (as the scaling law says)",
                       "compression falls with W", reference=0.0)
        claims.append(Claim(f"N={n}, compression per doubling of W = G: {text}",
                            evidence(path.name, count, value, low, high, suffix=""), MEASURED))
    return claims


def cost_model(calibration_path: Path, validation_path: Path, predictions_path: Path | None = None,
               model: str = "Llama-2-7B", task: str = "chat") -> list[Claim]:
    """Notebook 04: the published values the model is fitted to, its leave-one-out error, its error on this device,
    and (with predictions) each GPU class's predicted best speedup for `model`, labelled as a prediction."""
    from lab.studies.figures_cost import unverified_points
    from lab.studies.gpu_model import best_configs

    loo, valid = load_results(calibration_path), load_results(validation_path)
    unverified = len(set(loo["point"]) & unverified_points())
    error = loo.loc[loo["kind"].isin(("speedup", "compression")), "error_loo"].abs()
    loo_text = loo_error(calibration_path)
    claims = [Claim(f"{len(loo)} published GPU measurements the cost model is fitted to",
                    f"`{calibration_path.name}`, n = {len(loo)} values", PUBLISHED,
                    f"unverified: {unverified} of {len(loo)}" if unverified else "verified"),
              Claim("the cost model predicts a published value it was not fitted on",
                    f"`{calibration_path.name}`, n = {len(error)}, {loo_text}", MEASURED)]
    device = valid["error"].abs()
    claims.append(Claim("the cost model predicts this device's measured speedups",
                        f"`{validation_path.name}`, n = {len(device)} runs, median error {100 * device.median():.1f}%, "
                        f"worst {100 * device.max():.1f}%", MEASURED))
    if predictions_path is not None and predictions_path.exists():
        best = best_configs(load_results(predictions_path))
        for r in best[(best["model"] == model) & (best["task"] == task)].itertuples():
            claims.append(Claim(f"prediction: lookahead ({r.config}) {r.verdict} on {r.gpu} ({model}, {task}); "
                                "not measured", f"`{predictions_path.name}`, modelled {r.speedup:.2f}x "
                                f"[{r.speedup_low:.2f}, {r.speedup_high:.2f}]", MODELLED, loo_text))
    return claims


def sampling(path: Path) -> list[Claim]:
    """Notebook 05's speedups per temperature."""
    rows = load_results(path)
    summary = summarize_runs(rows, reference="plain", keys=("temperature", "method")).rename(columns={"prompts": "n"})
    return [_speedup_claim(path.name, f"lade sampling at T={r.temperature:g}", r,
                           rows.loc[(rows["method"] == "lade") & (rows["temperature"] == r.temperature), "speedup"],
                           "plain sampling")
            for r in summary[summary["method"] == "lade"].itertuples()]


def sampling_check(path: Path) -> list[Claim]:
    """Notebook 05's losslessness check (lab.studies.sampling_check): the joint tests and the power."""
    from lab.studies import sampling_check as sc

    samples = load_results(path)
    joint, found = sc.joint_tests(samples), sc.power(samples)
    claims = []
    for sampler, part in joint.groupby("sampler", sort=False):
        rejected = int(part["reject"].sum())
        text = ("no difference from plain sampling's joint law detected (no joint test rejected)" if not rejected else
                f"differs from plain sampling ({rejected} of {len(part)} joint tests rejected)")
        claims.append(Claim(f"{sampler}: {text}", f"`{path.name}`, n = {int(part['n'].iloc[0])} continuations x "
                            f"{len(part)} settings, min p = {part['pvalue'].min():.3g} (level "
                            f"{part['level'].iloc[0]:.2g}); compression "
                            + ", ".join(f"{c:.2f}" for c in part["compression"]), MEASURED))
    for r in found.itertuples():
        claims.append(Claim(f"power of the {r.test} test against a biased verifier ({r.setting}): {r.power:.0%}",
                            f"`{path.name}`, {r.rejections} of {r.replicates} replicates of n = {r.n} rejected, "
                            f"power {r.power:.0%} [{r.power_low:.0%}, {r.power_high:.0%}]", MEASURED))
    return claims


def ablation(path: Path, table: pd.DataFrame, rows: pd.DataFrame) -> list[Claim]:
    """Notebook 06: each variant measured, beside the published value it reproduces."""
    claims = []
    for r in table.rename(columns={"prompts": "n"}).itertuples():
        claims.append(_speedup_claim(path.name, f"ablation {r.variant}", r,
                                     rows.loc[rows["method"] == r.method, "speedup"], "greedy"))
        if pd.notna(getattr(r, "published_speedup", float("nan"))):
            claims.append(Claim(f"published {r.variant} (Llama-2-7B, A100)", f"`data/published/ablation.csv`, "
                                f"{r.published_speedup:.2f}x", PUBLISHED, published_status(r.published_verified)))
    return claims


def published_status(verified) -> str:
    """A published table's `verified` cell as a claim's qualifier: 'unverified' where it says so, else 'verified'."""
    return "unverified" if str(verified).startswith("unverified") or pd.isna(verified) else "verified"


def batches(path: Path, summary: pd.DataFrame, rows: pd.DataFrame) -> list[Claim]:
    """Notebook 09: each lade method's throughput over plain batched greedy per batch size, every set pooled."""
    from lab.harness.batched import POOLED, REFERENCE

    claims = []
    part = summary[(summary["prompt_set"] == POOLED) & (summary["method"] != REFERENCE)]
    for r in part.rename(columns={"batches": "n"}).itertuples():
        raw = rows.loc[(rows["method"] == r.method) & (rows["batch_size"] == r.batch_size), "speedup"]
        claims.append(_speedup_claim(path.name, f"{r.method} at batch {int(r.batch_size)}", r, raw,
                                     "plain batched greedy", "batches"))
    return claims


def batch_predictions(path: Path, curve: pd.DataFrame, loo_text: str, model: str, task: str) -> list[Claim]:
    """Notebook 09's GPU-class curve, labelled as the cost model's prediction."""
    part = curve[(curve["model"] == model) & (curve["task"] == task) & (curve["choice"] == "fixed")]
    claims = []
    for gpu, rows in part.groupby("gpu", sort=False):
        last = rows.sort_values("batch_size").iloc[-1]
        claims.append(Claim(f"prediction: {last.config} on {gpu} at batch {int(last.batch_size)} ({model}, {task}); "
                            "not measured", f"`{path.name}`, modelled {last.speedup:.2f}x [{last.speedup_low:.2f}, "
                            f"{last.speedup_high:.2f}]", MODELLED, loo_text))
    return claims


def corpus(path: Path) -> list[Claim]:
    """Notebook 10: lade auto with and without a corpus against greedy, Spec-Bench tasks pooled and two-turn
    MT-Bench."""
    rows = load_results(path)
    spec = rows[rows["workload"] == "spec_bench"]
    pooled = spec.assign(prompt_id=spec["prompt_set"] + "/" + spec["prompt_id"].astype(str),
                         prompt_set="spec_bench (tasks pooled)")
    return (method_claims(pooled, path.name) + method_claims(rows[rows["workload"] == "two_turns"], path.name))


def loo_error(calibration_path: Path) -> str:
    """The cost model's leave-one-out error on the published values (notebook 04's calibration)."""
    loo = load_results(calibration_path)
    error = loo.loc[loo["kind"].isin(("speedup", "compression")), "error_loo"].abs()
    return f"leave-one-out error median {100 * error.median():.0f}%, worst {100 * error.max():.0f}%"
