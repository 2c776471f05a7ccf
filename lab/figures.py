"""Figures of the notebooks: one style, PNG + PDF under figures/, titles naming model, data, device.

Visual language (same in every figure; Okabe-Ito colours, safe for colour-blind readers): published numbers are
grey hatched bars or grey diamonds; numbers measured in this run are blue; modelled numbers are orange. Every
measured speedup or compression carries its 95% bootstrap interval over prompts (lab.stats) as an error
bar; single prompts are small dots at fixed offsets. Legends sit outside the axes. Re-plotting the same results
gives byte-identical files (no timestamps in the PDF, no random jitter).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from .models import EMBEDDED_ALIASES, EMBEDDED_NAME
from .paths import figures_dir
from .stats import summarize_runs

OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
MEASURED = OKABE_ITO[0]
MODELLED = OKABE_ITO[1]
PUBLISHED = "0.45"
PUBLISHED_BAR = dict(color="0.88", edgecolor="0.35", hatch="//")
MEASURED_BAR = dict(color=MEASURED, edgecolor=MEASURED, alpha=0.85)
ERRORBAR = dict(fmt="none", ecolor="0.1", elinewidth=1.2, capsize=3, zorder=4)


def setup_style() -> None:
    sns.set_theme(style="whitegrid", context="notebook", font_scale=0.95, palette=list(OKABE_ITO))
    plt.rcParams.update({"figure.dpi": 100, "savefig.bbox": "tight", "axes.titleweight": "bold",
                         "figure.constrained_layout.use": True, "svg.hashsalt": "lade"})


def model_label(model: str, dtype: str | None = None) -> str:
    """The model's own name ('embedded' is SmolLM2-135M-Instruct; a folder is named by its last part)."""
    name = EMBEDDED_NAME if str(model).lower() in EMBEDDED_ALIASES else Path(str(model)).name or str(model)
    return f"{name}, {str(dtype).replace('torch.', '').replace('float', 'fp')}" if dtype else name


def title(what: str, model: str, dataset: str, device: str) -> str:
    return f"{what}\nmodel: {model_label(model)} | data: {dataset} | device: {device}"


def prompt_counts(params: dict, prompt_set: str) -> str:
    """How many prompts a results file's methods ran on `prompt_set` (its provenance params): "5 prompts", or
    "5 prompts (greedy and lade-auto: 45)" where headline methods ran more."""
    def count(value):
        return value.get(prompt_set) if isinstance(value, dict) else value

    every, wide = count(params["n_prompts"]), count(params.get("headline_prompts"))
    if not params.get("headline") or wide is None or wide == every:
        return f"{every} prompts"
    return f"{every} prompts (greedy and {', '.join(params['headline'])}: {wide})"


def _number(value: float, _pos: Any = None) -> str:
    """A tick label without float artefacts (0.30000000000000004 -> 0.3)."""
    return f"{value:.6g}"


def clean_ticks(fig: plt.Figure) -> None:
    """Plain, rounded numeric tick labels on every numeric axis of `fig`; a log axis spanning less than a decade
    gets ticks at 1, 2 and 5 times the powers of its base so that it keeps at least two labels."""
    for ax in fig.axes:
        for axis, limits in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
            if not isinstance(axis.get_major_formatter(), (matplotlib.ticker.ScalarFormatter,
                                                           matplotlib.ticker.LogFormatter)):
                continue
            if axis.get_scale() == "log":
                low, high = sorted(limits)
                if sum(low <= t <= high for t in axis.get_majorticklocs()) < 2:
                    axis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
            axis.set_major_formatter(matplotlib.ticker.FuncFormatter(_number))
            axis.set_minor_formatter(matplotlib.ticker.NullFormatter())


def save(fig: plt.Figure, name: str, quick: bool = False, provenance: Mapping[str, Any] | None = None) -> list[Path]:
    """Write `<figures>/<name>.png` and `.pdf` (no timestamps: the same figure gives the same bytes); a short
    provenance line (commit, model weights digest) goes into the files' metadata. Returns both paths."""
    clean_ticks(fig)
    base = figures_dir(quick) / name
    paths = [base.with_suffix(".png"), base.with_suffix(".pdf")]
    note = _provenance_note(provenance or {})
    fig.savefig(paths[0], dpi=150, metadata={"Description": note} if note else None)
    fig.savefig(paths[1], metadata={"CreationDate": None, "Subject": note or None})
    return paths


def _provenance_note(prov: Mapping[str, Any]) -> str:
    params = prov.get("params", {})
    parts = [f"git {prov['git_commit']}" + (" (dirty)" if prov.get("git_dirty") else "")] if prov.get("git_commit") \
        else []
    if params.get("weights_sha256"):
        parts.append(f"weights sha256 {params['weights_sha256']}")
    return "; ".join(parts)


def unity(ax: plt.Axes, horizontal: bool = True) -> None:
    (ax.axhline if horizontal else ax.axvline)(1.0, color="0.2", lw=1, ls=":", zorder=0)


def interval_errors(table: pd.DataFrame, column: str) -> np.ndarray:
    """[2, n] distances from `column` to its `_low` / `_high` interval bounds (0 where there is no interval)."""
    low, high = table[f"{column}_low"].to_numpy(float), table[f"{column}_high"].to_numpy(float)
    value = table[column].to_numpy(float)
    return np.nan_to_num(np.vstack([value - low, high - value]), nan=0.0).clip(min=0.0)


def _dots(ax: plt.Axes, x: float, values: Sequence[float], width: float = 0.25) -> None:
    """Single prompts as small dots at fixed, evenly spread offsets around x (no random jitter)."""
    values = list(values)
    offsets = np.linspace(-width / 2, width / 2, len(values)) if len(values) > 1 else [0.0]
    ax.plot(np.asarray(offsets) + x, values, "o", color="0.15", ms=2.5, zorder=5, label="_dots")


def speedup_bars(rows: pd.DataFrame, summary: pd.DataFrame, published_rows: pd.DataFrame, heading: str) -> plt.Figure:
    """Speedup (left) and compression (right) of every method in this run, with 95% intervals and single prompts;
    a published A100 bar stands beside the reproduced bar of the same configuration (its twin); published bars
    without a twin here are shown at the left end, and only bars whose configuration is known."""
    summary = summary[summary["method"] != "greedy"].reset_index(drop=True)
    known = published_rows[published_rows["config"] != ""]
    twins = {c: known[known["config"] == c] for c in summary["config"]}
    alone = known[~known["config"].isin(summary["config"])]
    fig, axes = plt.subplots(1, 2, figsize=(14, 4.8), gridspec_kw={"width_ratios": [1.6, 1]})
    ax = axes[0]
    labels, x = [], 0.0
    for r in alone.itertuples():
        ax.bar(x, r.speedup, 0.6, **PUBLISHED_BAR, label="published (A100, fp16)")
        ax.annotate(f"{r.speedup:.2f}x", (x, r.speedup), ha="center", va="bottom", fontsize=7, xytext=(0, 2),
                    textcoords="offset points")
        labels.append((x, f"{r.model}\nN,W,G={r.config}"))
        x += 1
    for r in summary.itertuples():
        twin = twins.get(r.config, known.iloc[:0])
        ax.bar(x - 0.2 * len(twin), r.speedup, 0.4 if len(twin) else 0.6, **MEASURED_BAR,
               label="measured here: all prompts (95% interval)")
        ax.errorbar(x - 0.2 * len(twin), r.speedup, yerr=interval_errors(summary.iloc[[r.Index]], "speedup"),
                    **ERRORBAR)
        _dots(ax, x - 0.2 * len(twin), rows.loc[rows["method"] == r.method, "speedup"], 0.2)
        for t in twin.itertuples():
            ax.bar(x + 0.2, t.speedup, 0.4, **PUBLISHED_BAR, label="published (A100, fp16)")
            ax.annotate(f"{t.model}\n{t.speedup:.2f}x", (x + 0.2, t.speedup), ha="center", va="bottom",
                        fontsize=6, xytext=(0, 2), textcoords="offset points")
        labels.append((x, r.method))
        x += 1
    ax.set_xticks([p for p, _ in labels], [label for _, label in labels], fontsize=7, rotation=25, ha="right")
    ax.set(ylabel="speedup over greedy (x, ratio of total times)", title="speedup: published and reproduced")
    prompts = rows.loc[rows["method"].isin(summary["method"]), "speedup"]  # the dots: no prompt may fall off the axes
    ax.set_ylim(0, 1.15 * np.nanmax([summary["speedup_high"].max(), summary["speedup"].max(),
                                      known["speedup"].max() if len(known) else 0.0,
                                      prompts.max() if len(prompts) else 0.0]))
    unity(ax)
    ax = axes[1]
    xs = np.arange(len(summary))
    ax.bar(xs, summary["compression"], 0.6, **MEASURED_BAR)
    ax.errorbar(xs, summary["compression"], yerr=interval_errors(summary, "compression"), **ERRORBAR)
    for i, r in enumerate(summary.itertuples()):
        sel = rows["method"] == r.method
        _dots(ax, i, rows.loc[sel, "compression"], 0.2)
    ax.set_xticks(xs, summary["method"], fontsize=7, rotation=25, ha="right")
    ax.set(ylabel="compression (new tokens per forward)", title="compression (this run)")
    legend_below(fig, axes[0])
    fig.suptitle(heading)
    return fig


def legend_below(fig: plt.Figure, ax: plt.Axes | Sequence[plt.Axes], ncol: int = 3) -> None:
    """One legend under the figure for the labelled artists of `ax` (one axes or several), each label once."""
    handles, labels = [], []
    for one in [ax] if isinstance(ax, plt.Axes) else ax:
        h, lab = one.get_legend_handles_labels()
        handles, labels = handles + h, labels + lab
    unique = {label: h for h, label in zip(handles, labels) if not label.startswith("_")}
    if unique:
        fig.legend(unique.values(), unique.keys(), loc="outside lower center", ncol=ncol, fontsize=8, frameon=False)


def scaling_plot(table: pd.DataFrame, heading: str) -> plt.Figure:
    """Compression (95% interval) vs per-step FLOPs (log x) for each N (G = W); right: vs W (log2)."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.6))
    for color, (n, group) in zip(OKABE_ITO, table.groupby("N")):
        err = interval_errors(group, "compression")
        for ax, x in ((axes[0], group["step_flops"]), (axes[1], group["W"])):
            ax.errorbar(x, group["compression"], yerr=err, fmt="o-", color=color, capsize=3, label=f"N={int(n)}")
    axes[0].set(xscale="log", xlabel="FLOPs per step (2 x params x tokens fed, log scale)",
                ylabel="step compression (tokens per forward)", title="compression vs per-step FLOPs")
    axes[1].set_xscale("log", base=2)
    axes[1].set_xticks(sorted(table["W"].unique()))
    axes[1].set(xlabel="window size W = G (log2 scale)", ylabel="step compression",
                title="a straight line here = linear fall in steps per doubling of W")
    legend_below(fig, axes[0], ncol=len(table["N"].unique()))
    fig.suptitle(heading)
    return fig


def ranks_plot(rows: pd.DataFrame, heading: str) -> plt.Figure:
    """Lookahead parallelism: compression and tokens fed per rank per step vs ranks (window share fixed per
    rank), with the one-process run of the widest total window as a grey reference diamond."""
    parallel = rows[~rows["label"].str.contains("reference")].sort_values("ranks")
    reference = rows[rows["label"].str.contains("reference")]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, column, label in ((axes[0], "compression", "step compression (tokens per forward)"),
                              (axes[1], "step_tokens_per_rank", "tokens fed per rank per step")):
        ax.plot(parallel["ranks"], parallel[column], "o-", color=MEASURED, label="R ranks, W = G = share x R")
        ax.plot([parallel["ranks"].max()] * len(reference), reference[column], "D", color=PUBLISHED, ms=9,
                label="one process, same total W and G")
        ax.set(xlabel="ranks R (gloo)", ylabel=label, xticks=sorted(parallel["ranks"].unique()))
    legend_below(fig, axes[0], ncol=2)
    fig.suptitle(heading)
    return fig


def sampling_plot(df: pd.DataFrame, heading: str) -> plt.Figure:
    """Speedup over plain sampling and compression of lookahead sampling per temperature: all prompts with 95%
    intervals (lab.stats), single prompts as dots."""
    summary = summarize_runs(df, reference="plain", keys=("temperature", "method"))
    summary = summary[summary["method"] == "lade"].reset_index(drop=True)
    lade_rows = df[df["method"] == "lade"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for ax, column, label in ((axes[0], "speedup", "speedup over plain sampling (x)"),
                              (axes[1], "compression", "compression (tokens per forward)")):
        xs = np.arange(len(summary))
        ax.errorbar(xs, summary[column], yerr=interval_errors(summary, column), fmt="o-", color=MEASURED,
                    capsize=4, label="measured: all prompts (95% interval)")
        for i, t in enumerate(summary["temperature"]):
            _dots(ax, i, lade_rows.loc[lade_rows["temperature"] == t, column], 0.15)
        ax.set_xticks(xs, [_number(t) for t in summary["temperature"]])
        ax.set(xlabel="temperature", ylabel=label)
        unity(ax)
    legend_below(fig, axes[0], ncol=1)
    fig.suptitle(heading)
    return fig


def distribution_plot(dist: pd.DataFrame, tv: pd.DataFrame, heading: str, top: int = 12) -> plt.Figure:
    """Left: empirical frequencies of the most common tokens at the last sampled position, plain vs lade.
    Right: total-variation distance to plain sampling per position, lade vs an independent plain run."""
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.6), gridspec_kw={"width_ratios": [1.5, 1]})
    last = int(dist["position"].max())
    at = dist[(dist["position"] == last) & dist["sampler"].isin(["plain", "lade"])]
    freq = at.groupby("sampler")["token"].value_counts(normalize=True).rename("frequency").reset_index()
    tokens = list(freq[freq["sampler"] == "plain"].nlargest(top, "frequency")["token"])
    freq = freq[freq["token"].isin(tokens)].copy()
    texts = at.drop_duplicates("token").set_index("token")["text"].map(repr)
    freq["token text"] = freq["token"].map(texts)
    sns.barplot(data=freq, x="token text", y="frequency", hue="sampler", order=[texts[t] for t in tokens],
                hue_order=["plain", "lade"], palette={"plain": "0.6", "lade": MEASURED}, ax=axes[0], errorbar=None,
                legend=False)
    axes[0].set(xlabel=f"token at position {last + 1} (grey: plain, blue: lade)", ylabel="empirical frequency",
                title=f"top {top} tokens at position {last + 1}")
    axes[0].tick_params(axis="x", labelrotation=45, labelsize=7)
    for sampler, color, marker in (("lade", MEASURED, "o"), ("plain (independent seeds)", PUBLISHED, "s")):
        part = tv[tv["sampler"] == sampler]
        axes[1].plot(part["position"] + 1, part["tv_distance"], marker=marker, color=color, label=sampler)
    axes[1].set(xlabel="generated token position", ylabel="total-variation distance to plain sampling",
                title="lade vs noise floor (plain vs plain)")
    axes[1].set_ylim(bottom=0)
    legend_below(fig, axes[1], ncol=2)
    fig.suptitle(heading)
    return fig


def ablation_plot(table: pd.DataFrame, order: Sequence[str], heading: str) -> plt.Figure:
    """Per ablation variant: this run's speedup and compression with 95% intervals (blue) beside the paper's
    (grey hatched)."""
    table = table.set_index("variant").reindex(order).reset_index()
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    y = np.arange(len(table))
    for ax, ours, paper, label in ((axes[0], "speedup", "published_speedup", "speedup over greedy (x)"),
                                   (axes[1], "compression", "published_compression", "compression (tokens/step)")):
        ax.barh(y - 0.2, table[ours], 0.4, **MEASURED_BAR, label="measured here (95% interval)")
        ax.errorbar(table[ours], y - 0.2, xerr=interval_errors(table, ours), **ERRORBAR)
        has = table[paper].notna()
        ax.barh(y[has] + 0.2, table.loc[has, paper], 0.4, **PUBLISHED_BAR, label="published (Llama-2-7B, A100)")
        for i, (a, high, b) in enumerate(zip(table[ours], table[f"{ours}_high"], table[paper])):
            ax.annotate(f"{a:.2f}", (np.nanmax([a, high]), i - 0.2), va="center", fontsize=8, xytext=(3, 0),
                        textcoords="offset points")
            if pd.notna(b):
                ax.annotate(f"{b:.2f}", (b, i + 0.2), va="center", fontsize=8, xytext=(3, 0),
                            textcoords="offset points")
        ax.set_yticks(y, table["variant"] if ax is axes[0] else [""] * len(y))
        ax.invert_yaxis()
        ax.set_xlabel(label)
        ax.set_xlim(0, 1.2 * np.nanmax([table[f"{ours}_high"].max(), table[ours].max(), table[paper].max()]))
        unity(ax, horizontal=False)
    legend_below(fig, axes[0], ncol=2)
    fig.suptitle(heading)
    return fig


def _grouped_bars(ax: plt.Axes, measured: pd.DataFrame, groups: Sequence[str], group_column: str, series: str,
                  column: str) -> None:
    """One bar per (group, series) with its 95% interval: groups along x, series side by side in Okabe-Ito colours."""
    names = list(dict.fromkeys(measured[series]))
    width = 0.8 / max(len(names), 1)
    for k, (name, color) in enumerate(zip(names, OKABE_ITO)):
        part = measured[measured[series] == name].set_index(group_column).reindex(groups).reset_index()
        xs = np.arange(len(groups)) - 0.4 + width * (k + 0.5)
        ax.bar(xs, part[column], width, color=color, alpha=0.85, label=name)
        ax.errorbar(xs, part[column], yerr=interval_errors(part, column), **ERRORBAR)
    ax.set_xticks(np.arange(len(groups)), [str(g) for g in groups], fontsize=7, rotation=25, ha="right")


def speedup_by_model(summary: pd.DataFrame, published_rows: pd.DataFrame, heading: str) -> plt.Figure:
    """Several models (one per spec entry): this run's speedup and compression per model and method with 95%
    intervals; published A100 speedups of models of the same names as grey diamonds on the speedup panel."""
    measured = summary[summary["method"] != "greedy"]
    models = list(dict.fromkeys(measured["model"]))
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.6))
    for ax, column, label in ((axes[0], "speedup", "speedup over greedy (x, ratio of total times)"),
                              (axes[1], "compression", "compression (new tokens per forward)")):
        _grouped_bars(ax, measured, models, "model", "method", column)
        ax.set(ylabel=label)
    known = published_rows[published_rows["config"] != ""]
    for i, model in enumerate(models):
        for r in known[known["model"] == model].itertuples():
            axes[0].plot(i, r.speedup, "D", color=PUBLISHED, ms=7, label=f"published (A100, fp16, N,W,G={r.config})")
    unity(axes[0])
    legend_below(fig, axes[0])
    fig.suptitle(heading)
    return fig


def spec_bench_plot(summary: pd.DataFrame, leaderboard: pd.DataFrame, labels: dict[str, str],
                    heading: str) -> plt.Figure:
    """Spec-Bench per task. Left: this run's speedup per task and method with 95% intervals, the published
    leaderboard's Lookahead and PLD speedups (Vicuna, fp16) as grey markers on the same axes. Right: this run's
    compression per task, the leaderboard's overall mean accepted tokens as grey lines."""
    tasks = [t for t in labels if t != "overall" and t in set(summary["task"])]
    measured = summary[summary["method"] != "greedy"].copy()
    several = measured["model"].nunique() > 1
    measured["series"] = measured["model"] + ": " + measured["method"] if several else measured["method"]
    fig, axes = plt.subplots(1, 2, figsize=(15, 5))
    for ax, column, label in ((axes[0], "speedup", "speedup over greedy (x, ratio of total times)"),
                              (axes[1], "compression", "compression (new tokens per forward)")):
        _grouped_bars(ax, measured, tasks, "task", "series", column)
        ax.set_xticks(np.arange(len(tasks)), [labels[t] for t in tasks], fontsize=7, rotation=0)
        ax.set(ylabel=label)
    markers = {"lookahead": "D", "pld": "s"}
    setups = list(dict.fromkeys(leaderboard["setup"]))
    greys = [str(g) for g in np.linspace(0.2, 0.65, max(len(setups), 1))]
    for grey, setup in zip(greys, setups):
        for method, marker in markers.items():
            rows = leaderboard[(leaderboard["setup"] == setup) & (leaderboard["method"] == method)]
            rows = rows.set_index("task").reindex(tasks)
            axes[0].plot(np.arange(len(tasks)), rows["speedup"], marker, color=grey, ms=5, ls="none",
                         label=f"published {method}: {setup}")
    overall = leaderboard[leaderboard["task"] == "overall"].drop_duplicates("setup")
    for grey, (_, row) in zip(greys, overall.iterrows()):
        axes[1].axhline(row["mean_accepted_tokens"], color=grey, lw=1, ls=":", zorder=0,
                        label=f"published mean accepted tokens: {row['setup']}")
    unity(axes[0])
    legend_below(fig, axes, ncol=3)
    fig.suptitle(heading)
    return fig
