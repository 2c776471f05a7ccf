"""Figures of the notebooks: one style (lab.harness.figure_style), PNG + PDF under figures/, titles naming model, data,
device; published numbers in their own group or panel with their device and precision named."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from lab.harness.figure_style import (  # noqa: F401  (re-exported: notebooks use figures.save, figures.title, ...)
    ERRORBAR,
    MEASURED,
    MEASURED_BAR,
    MIN_INTERVAL,
    MODELLED,
    OKABE_ITO,
    PUBLISHED,
    PUBLISHED_BAR,
    _number,
    capped_limit,
    clean_ticks,
    count_range,
    dots,
    errorbars,
    group_header,
    interval_errors,
    legend_below,
    measured_on,
    model_label,
    precision,
    prompt_counts,
    provenance_note,
    save,
    separator,
    setup_style,
    title,
    unity,
)
from lab.harness.stats import summarize_runs
from lab.studies.figures_run import _grouped_bars, ablation_plot, distribution_plot, spec_bench_plot  # noqa: F401

MEASURED_LABEL = "measured here: ratio of total times (95% interval where n >= 5)"


def _published_label(rows: pd.DataFrame) -> str:
    """'A100, fp16' (or '1-2 x A100, fp16') of published rows, from their hardware, n_gpus and dtype columns."""
    gpus = sorted({int(n) for n in rows.get("n_gpus", pd.Series([1])).dropna()}) or [1]
    count = "" if gpus == [1] else f"{gpus[0]}-{gpus[-1]} x " if len(gpus) > 1 else f"{gpus[0]} x "
    dtypes = ", ".join(sorted({precision(d) for d in rows.get("dtype", pd.Series(["fp16"])).dropna()}))
    return f"{count}{'/'.join(sorted(set(rows['hardware'])))}, {dtypes}"


def speedup_bars(rows: pd.DataFrame, summary: pd.DataFrame, published_rows: pd.DataFrame, heading: str) -> plt.Figure:
    """Speedup (left) and compression (right) of every method in this run (95% intervals where n >= 5, single
    prompts as dots), and on the left, apart and headed with their device and precision, the published bars of
    the same dataset (each with its configuration, 'not stated' where the source gives none)."""
    summary = summary[summary["method"] != "greedy"].reset_index(drop=True)
    known = published_rows[published_rows["params_b"].notna()].reset_index(drop=True)  # models, not "up to" claims
    here = measured_on(rows) or "this run"
    fig, axes = plt.subplots(1, 2, figsize=(14, 5.4), gridspec_kw={"width_ratios": [1.6, 1]})
    ax = axes[0]
    xs_pub = np.arange(len(known), dtype=float)
    xs = (len(known) + 0.5 if len(known) else 0.0) + np.arange(len(summary))
    for x, r in zip(xs_pub, known.itertuples()):
        ax.bar(x, r.speedup, 0.6, **PUBLISHED_BAR, label=f"published ({r.source})")
        ax.annotate(f"{r.speedup:.2f}x", (x, r.speedup), ha="center", va="bottom", fontsize=7, xytext=(0, 2),
                    textcoords="offset points")
    per_prompt = {r.method: rows.loc[rows["method"] == r.method, "speedup"] for r in summary.itertuples()}
    limit = capped_limit([*summary["speedup"], *summary["speedup_high"], *known["speedup"], 1.0],
                         [v for values in per_prompt.values() for v in values])
    ax.bar(xs, summary["speedup"], 0.6, **MEASURED_BAR, label=MEASURED_LABEL)
    errors = interval_errors(summary, "speedup")
    errorbars(ax, xs, summary["speedup"], errors)
    for x, r, high in zip(xs, summary.itertuples(), summary["speedup"].to_numpy(float) + errors[1]):
        dots(ax, x, per_prompt[r.method], 0.3, cap=0.97 * limit)
        ax.annotate(f"{r.speedup:.2f}x", (x + 0.18, min(high, 0.97 * limit)), ha="left", va="bottom", fontsize=7,
                    xytext=(0, 2), textcoords="offset points", color=MEASURED, weight="bold")
    gpus = [f" ({int(r.n_gpus)} GPUs)" if "n_gpus" in known and r.n_gpus > 1 else "" for r in known.itertuples()]
    labels = [f"{r.model}{g}\nN,W,G={r.config or 'not stated'}" for r, g in zip(known.itertuples(), gpus)]
    labels += [f"{r.method}\nn={r.prompts}" for r in summary.itertuples()]
    ax.set_xticks([*xs_pub, *xs], labels, fontsize=7, rotation=30, ha="right", rotation_mode="anchor")
    ax.set(ylabel="speedup over greedy (x)", ylim=(0, limit))
    if len(known):
        separator(ax, len(known) - 0.25)
        group_header(ax, xs_pub.mean(), f"published: {_published_label(known)}")
    group_header(ax, xs.mean() if len(xs) else 0.0, f"measured here: {here}")
    unity(ax)
    ax = axes[1]
    xs = np.arange(len(summary))
    per_prompt = {r.method: rows.loc[rows["method"] == r.method, "compression"] for r in summary.itertuples()}
    limit = capped_limit([*summary["compression"], *summary["compression_high"]],
                         [v for values in per_prompt.values() for v in values])
    ax.bar(xs, summary["compression"], 0.6, **MEASURED_BAR)
    errorbars(ax, xs, summary["compression"], interval_errors(summary, "compression"))
    for x, r in zip(xs, summary.itertuples()):
        dots(ax, x, per_prompt[r.method], 0.3, cap=0.97 * limit)
    ax.set_xticks(xs, [f"{m}\nn={n}" for m, n in zip(summary["method"], summary["prompts"])], fontsize=7,
                  rotation=30, ha="right", rotation_mode="anchor")
    ax.set(ylabel="compression (new tokens per forward)", ylim=(0, limit), title=f"compression, measured here: {here}")
    ax.title.set_fontsize(9)
    legend_below(fig, axes, ncol=2)
    fig.suptitle(heading)
    return fig


def speedup_by_model(summary: pd.DataFrame, published_rows: pd.DataFrame, heading: str) -> plt.Figure:
    """Several models (one per spec entry): this run's speedup and compression per model and method with 95%
    intervals; published A100 speedups of models of the same names as grey diamonds on the speedup panel."""
    measured = summary[summary["method"] != "greedy"]
    models = list(dict.fromkeys(measured["model"]))
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    for ax, column, label in ((axes[0], "speedup", "speedup over greedy (x, ratio of total times)"),
                              (axes[1], "compression", "compression (new tokens per forward)")):
        _grouped_bars(ax, measured, models, "model", "method", column)
        ax.set(ylabel=label)
    known = published_rows[published_rows["params_b"].notna()]
    for i, model in enumerate(models):
        for r in known[known["model"] == model].itertuples():
            axes[0].plot(i, r.speedup, "D", color=PUBLISHED, ms=7,
                         label=f"published ({_published_label(known)}, N,W,G={r.config or 'not stated'})")
    unity(axes[0])
    legend_below(fig, axes[0])
    fig.suptitle(heading)
    return fig


def scaling_plot(table: pd.DataFrame, heading: str, rows: pd.DataFrame | None = None) -> plt.Figure:
    """Compression vs per-step GFLOPs (log x) for each N with G = W (95% intervals where n >= 5; with `rows`, the
    results file's rows, single prompts as dots where n < 5); each point's W is written beside the first series'
    points; each N's least-squares line in log(FLOPs) is stated (slope, R²) in the legend. The series are nudged
    apart along x so that their intervals do not hide each other."""
    fig, ax = plt.subplots(figsize=(9, 5.2))
    groups = list(table.groupby("N"))
    for k, (color, (n, group)) in enumerate(zip(OKABE_ITO, groups)):
        x = group["step_flops"].to_numpy(float) / 1e9 * (1 + 0.05 * (k - (len(groups) - 1) / 2))
        fit = _log_fit(x, group["compression"].to_numpy(float))
        ax.plot(x, group["compression"], "o-", color=color,
                label=f"N={int(n)} (n={int(group['prompts'].min())} prompts){fit}")
        errorbars(ax, x, group["compression"], interval_errors(group, "compression"), ecolor=color)
        for xi, config, prompts in zip(x, group["config"], group["prompts"]):
            if rows is not None and prompts < MIN_INTERVAL:  # no interval: its single prompts instead
                dots(ax, xi, rows.loc[rows["config"] == config, "compression"], 0.08 * xi, unit=f"prompts, N={int(n)}",
                     color=color)
        if k == 0:
            last = -np.inf
            for xi, yi, w in sorted(zip(x, group["compression"], group["W"])):
                if np.log10(xi) - last > 0.12:  # points closer than that along x stay unnamed, not overprinted
                    ax.annotate(f"W={int(w)}", (xi, yi), xytext=(0, -12), textcoords="offset points", ha="center",
                                fontsize=7, color="0.3")
                    last = np.log10(xi)
    ax.set(xscale="log", xlabel="GFLOPs per step (2 x parameters x tokens fed; log scale)",
           ylabel="step compression (tokens per forward)", ylim=(0, None),
           title="the paper's law predicts a straight line here; legend: least-squares line per N and its R²")
    ax.title.set_fontsize(9)
    legend_below(fig, ax, ncol=len(groups))
    fig.suptitle(heading)
    return fig


def _log_fit(flops: np.ndarray, compression: np.ndarray) -> str:
    """', slope s per decade, R² r' of the least-squares line of compression on log10(FLOPs); '' under 3 points."""
    keep = np.isfinite(flops) & np.isfinite(compression) & (flops > 0)
    if keep.sum() < 3 or np.ptp(np.log10(flops[keep])) == 0:
        return ""
    x, y = np.log10(flops[keep]), compression[keep]
    slope, intercept = np.polyfit(x, y, 1)
    residual, total = ((y - (slope * x + intercept)) ** 2).sum(), ((y - y.mean()) ** 2).sum()
    r2 = 1 - residual / total if total > 0 else float("nan")
    return f": slope {slope:.2f} per decade, R² {r2:.2f}"


def ranks_plot(rows: pd.DataFrame, heading: str) -> plt.Figure:
    """Lookahead parallelism: compression and tokens fed per rank per step vs ranks (window share fixed per
    rank), axes from 0; the one-process run of the widest total window as a dashed reference line."""
    parallel = rows[~rows["label"].str.contains("reference")].sort_values("ranks")
    reference = rows[rows["label"].str.contains("reference")]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.8))
    for ax, column, label in ((axes[0], "compression", "compression (tokens per forward)"),
                              (axes[1], "step_tokens_per_rank", "tokens fed per rank per step")):
        ax.plot(parallel["ranks"], parallel[column], "o-", color=MEASURED, label="R ranks, W = G = share x R")
        for value in reference[column]:
            ax.axhline(value, color=PUBLISHED, ls="--", lw=1.2, label="one process, the widest total W and G")
        top = max(parallel[column].max(), reference[column].max() if len(reference) else 0)
        ax.set(xlabel="ranks R (gloo)", ylabel=label, xticks=sorted(parallel["ranks"].unique()), ylim=(0, 1.15 * top))
    legend_below(fig, axes[0], ncol=2)
    fig.suptitle(heading)
    return fig


def sampling_plot(df: pd.DataFrame, heading: str) -> plt.Figure:
    """Speedup over plain sampling and compression of lookahead sampling per temperature (95% intervals where
    n >= 5), single prompts as dots."""
    summary = summarize_runs(df, reference="plain", keys=("temperature", "method"))
    summary = summary[summary["method"] == "lade"].reset_index(drop=True)
    lade_rows = df[df["method"] == "lade"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6))
    for ax, column, label in ((axes[0], "speedup", "speedup over plain sampling (x)"),
                              (axes[1], "compression", "compression (tokens per forward)")):
        xs = np.arange(len(summary))
        ax.plot(xs, summary[column], "o-", color=MEASURED,
                label="measured: ratio of totals over the prompts (95% interval where n >= 5)")
        errorbars(ax, xs, summary[column], interval_errors(summary, column), ecolor=MEASURED)
        for i, t in enumerate(summary["temperature"]):
            dots(ax, i, lade_rows.loc[lade_rows["temperature"] == t, column], 0.15)
        ax.set_xticks(xs, [f"{_number(t)}\nn={n}" for t, n in zip(summary["temperature"], summary["prompts"])])
        ax.set(xlabel="temperature", ylabel=label, ylim=(0, None))
        if column == "speedup":
            unity(ax)
    legend_below(fig, axes[0], ncol=3)
    fig.suptitle(heading)
    return fig
