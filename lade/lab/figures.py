"""Figures of the notebooks: one seaborn style, PNG + PDF under figures/, titles naming model, data, device.

Visual language (same in every figure): published numbers are grey hatched bars or grey diamonds;
numbers measured in this run are solid blue; modelled (roofline) numbers are orange, dashed or outlined.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from .paths import figures_dir

MEASURED = "#1f5fa8"
PUBLISHED = "0.55"
MODELLED = "#e07b00"
PUBLISHED_BAR = dict(color="0.85", edgecolor="0.35", hatch="//")
MEASURED_BAR = dict(color=MEASURED, edgecolor=MEASURED)


def setup_style() -> None:
    sns.set_theme(style="whitegrid", context="notebook", font_scale=0.95)
    plt.rcParams.update({"figure.dpi": 100, "savefig.bbox": "tight", "axes.titleweight": "bold"})


def title(what: str, model: str, dataset: str, device: str) -> str:
    return f"{what}\nmodel: {model} | data: {dataset} | device: {device}"


def save(fig: plt.Figure, name: str, quick: bool = False) -> list[Path]:
    """Write `<figures>/<name>.png` and `.pdf`; returns both paths."""
    base = figures_dir(quick) / name
    paths = [base.with_suffix(".png"), base.with_suffix(".pdf")]
    fig.savefig(paths[0], dpi=150)
    fig.savefig(paths[1])
    return paths


def _unity(ax: plt.Axes, horizontal: bool = True) -> None:
    (ax.axhline if horizontal else ax.axvline)(1.0, color="0.2", lw=1, ls=":", zorder=0)


def _published_panel(ax: plt.Axes, published_rows: pd.DataFrame) -> None:
    """Published speedups per model (hatched grey), labelled with their N,W,G."""
    labels = [f"{m}\nN,W,G={c or '?'}" for m, c in zip(published_rows["model"], published_rows["config"])]
    ax.bar(labels, published_rows["speedup"], **PUBLISHED_BAR, label="published (A100, fp16)")
    for i, v in enumerate(published_rows["speedup"]):
        ax.text(i, v, f"{v:.2f}x", ha="center", va="bottom", fontsize=8)
    ax.set(ylabel="speedup over greedy (x)", title="published")
    ax.tick_params(axis="x", labelsize=7, labelrotation=30)
    _unity(ax)


def speedup_bars(rows: pd.DataFrame, summary: pd.DataFrame, published_rows: pd.DataFrame, heading: str) -> plt.Figure:
    """Left: published A100 speedups per model (hatched grey). Right: this run's speedup per method (blue bars:
    median of per-prompt ratios; dots: single prompts) and its tokens/s."""
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2), gridspec_kw={"width_ratios": [1, 1.3, 1.3]})
    _published_panel(axes[0], published_rows)
    axes[0].legend(loc="lower right", fontsize=8)
    order = list(summary["method"])
    ax = axes[1]
    ax.bar(order, summary["speedup_median"], **MEASURED_BAR, alpha=0.85, label="measured: median")
    sns.stripplot(data=rows, x="method", y="speedup", order=order, color="0.1", size=3, ax=ax, jitter=0.15)
    for i, v in enumerate(summary["speedup_median"]):
        ax.text(i, v, f"{v:.2f}x", ha="center", va="bottom", fontsize=8)
    ax.set(ylabel="speedup over greedy (x)", xlabel="", title="reproduced (this run)")
    _unity(ax)
    ax.legend(loc="lower right", fontsize=8)
    ax = axes[2]
    sns.barplot(data=rows, x="method", y="tokens_per_s", order=order, color=MEASURED, alpha=0.85, ax=ax,
                errorbar=("ci", 95))
    twin = ax.twinx()
    twin.plot(order, summary["compression_mean"], "o-", color="0.15", label="compression (tokens/step)")
    twin.set_ylabel("compression (tokens per forward)")
    twin.grid(False)
    twin.legend(loc="upper right", fontsize=8)
    ax.set(ylabel="tokens/s", xlabel="", title="throughput and compression (this run)")
    for a in axes[1:]:
        a.tick_params(axis="x", labelrotation=25, labelsize=8)
    fig.suptitle(heading)
    fig.tight_layout()
    return fig


def scaling_plot(table: pd.DataFrame, heading: str) -> plt.Figure:
    """Compression vs per-step FLOPs (log x) for each N (G = W), W annotated; right: vs log2 W."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.3))
    palette = sns.color_palette("crest", table["N"].nunique())
    for color, (n, group) in zip(palette, table.groupby("N")):
        axes[0].plot(group["step_flops"], group["compression"], "o-", color=color, label=f"N={int(n)}")
        for _, r in group.iterrows():
            axes[0].annotate(f"W={int(r['W'])}", (r["step_flops"], r["compression"]), fontsize=7,
                             textcoords="offset points", xytext=(3, 3))
        axes[1].plot(group["W"], group["compression"], "o-", color=color, label=f"N={int(n)}")
    axes[0].set(xscale="log", xlabel="FLOPs per step (2 x params x tokens fed, log scale)",
                ylabel="step compression (tokens per forward)", title="compression vs per-step FLOPs")
    axes[1].set_xscale("log", base=2)
    axes[1].xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    axes[1].set(xlabel="window size W = G (log2 scale)", ylabel="step compression",
                title="a straight line here = linear fall in steps per doubling of W")
    axes[1].xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    axes[1].set_xticks(sorted(table["W"].unique()))
    for ax in axes:
        ax.legend(title="n-gram size", fontsize=8)
    fig.suptitle(heading)
    fig.tight_layout()
    return fig


def ranks_plot(rows: pd.DataFrame, heading: str) -> plt.Figure:
    """Lookahead parallelism: compression and tokens fed per rank per step vs ranks (window share fixed per
    rank), with the one-process run of the widest total window as a grey reference diamond."""
    parallel = rows[~rows["label"].str.contains("reference")].sort_values("ranks")
    reference = rows[rows["label"].str.contains("reference")]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, column, label in ((axes[0], "compression", "step compression (tokens per forward)"),
                              (axes[1], "step_tokens_per_rank", "tokens fed per rank per step")):
        ax.plot(parallel["ranks"], parallel[column], "o-", color=MEASURED, label="R ranks, W = G = share x R")
        ax.plot([parallel["ranks"].max()] * len(reference), reference[column], "D", color=PUBLISHED, ms=9,
                label="one process, same total W and G")
        ax.set(xlabel="ranks R (gloo)", ylabel=label, xticks=sorted(parallel["ranks"].unique()))
        ax.legend(fontsize=8)
    fig.suptitle(heading)
    fig.tight_layout()
    return fig


def latency_plot(measured: pd.DataFrame, modelled: pd.DataFrame, model_size: str, heading: str) -> plt.Figure:
    """latency(q)/latency(1) vs tokens per step q: measured on this device (blue, solid markers) and
    roofline-modelled per GPU class for one model size (orange family, dashed)."""
    fig, ax = plt.subplots(figsize=(8.5, 4.8))
    model_rows = modelled[modelled["model"] == model_size]
    gpus = list(dict.fromkeys(model_rows["gpu"]))
    palette = sns.color_palette("YlOrBr", len(gpus) + 2)[2:]
    for color, gpu in zip(palette, gpus):
        g = model_rows[model_rows["gpu"] == gpu]
        ax.plot(g["q"], g["relative"], ls="--", color=color, lw=1.4, label=f"modelled: {gpu}, {model_size} fp16")
    ax.plot(measured["q"], measured["relative"], "o-", color=MEASURED, lw=2.2, ms=6,
            label="measured: this device")
    ax.set(xscale="log", yscale="log", xlabel="tokens fed per forward step q (log)",
           ylabel="latency(q) / latency(1)  (log)")
    ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
    ax.legend(fontsize=7, ncol=2, loc="upper left")
    ax.set_title(heading)
    fig.tight_layout()
    return fig


def gpu_speedup_heatmap(predictions: pd.DataFrame, heading: str) -> plt.Figure:
    """Modelled speedup per GPU class x config, one panel per model size; cells where the fp16 weights do not
    fit one GPU are blank."""
    models = list(dict.fromkeys(predictions["model"]))
    fig, axes = plt.subplots(1, len(models), figsize=(5.2 * len(models), 4.8), sharey=True)
    axes = np.atleast_1d(axes)
    for ax, name in zip(axes, models):
        rows = predictions[(predictions["model"] == name)]
        order = dict(index=list(dict.fromkeys(rows["gpu"])), columns=list(dict.fromkeys(rows["config"])))
        grid = rows.pivot(index="gpu", columns="config", values="speedup").reindex(**order)
        fits = rows.pivot(index="gpu", columns="config", values="fits_memory").reindex(**order)
        sns.heatmap(grid.where(fits.astype(bool)), annot=True, fmt=".2f", cmap="RdBu", center=1.0, vmin=0.3,
                    vmax=1.7, cbar=ax is axes[-1], ax=ax, linewidths=0.5, annot_kws={"fontsize": 7},
                    cbar_kws={"label": "modelled speedup (x)"})
        ax.grid(False)
        ax.set(title=f"{name} (blank: does not fit one GPU)", xlabel="config N,W,G", ylabel="")
        ax.tick_params(axis="x", labelrotation=40, labelsize=8)
    fig.suptitle(heading)
    fig.tight_layout()
    return fig


def rtx3090_plot(case: pd.DataFrame, heading: str) -> plt.Figure:
    """Default vs tuned parameters on an RTX 3090 (7B fp16): modelled (orange outline) beside reported (grey)."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    x = np.arange(len(case))
    ax.bar(x - 0.2, case["reported_speedup"], 0.4, **PUBLISHED_BAR, label="reported (feature-request discussion)")
    ax.bar(x + 0.2, case["modelled_speedup"], 0.4, color="white", edgecolor=MODELLED, lw=2, ls="--",
           label="modelled (roofline x compression)")
    for i, r in case.iterrows():
        ax.text(i + 0.2, r["modelled_speedup"], f"{r['modelled_speedup']:.2f}x\nq={r['step_tokens']:.0f}",
                ha="center", va="bottom", fontsize=8)
        ax.text(i - 0.2, r["reported_speedup"], f"{r['reported_speedup']:.2f}x", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, [f"{p}\n(N,W,G={c})" for p, c in zip(case["parameters"], case["config"])])
    ax.set(ylabel="speedup over greedy (x)")
    ax.set_ylim(0, 1.25 * max(case["modelled_speedup"].max(), case["reported_speedup"].max()))
    _unity(ax)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2)
    ax.set_title(heading)
    fig.tight_layout()
    return fig


def sampling_plot(df: pd.DataFrame, heading: str) -> plt.Figure:
    """Speedup and compression of lookahead sampling vs temperature (medians, per-prompt dots)."""
    lade_rows = df[df["method"] == "lade"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, column, label in ((axes[0], "speedup", "speedup over plain sampling (x)"),
                              (axes[1], "compression", "compression (tokens per forward)")):
        sns.stripplot(data=lade_rows, x="temperature", y=column, color="0.2", size=3, ax=ax, jitter=0.1)
        sns.pointplot(data=lade_rows, x="temperature", y=column, estimator="median", color=MEASURED, ax=ax,
                      errorbar=None, label="measured: median")
        ax.set(xlabel="temperature", ylabel=label)
        _unity(ax)
    fig.suptitle(heading)
    fig.tight_layout()
    return fig


def distribution_plot(dist: pd.DataFrame, tv: pd.DataFrame, heading: str,
                      top: int = 12) -> plt.Figure:
    """Left: empirical frequencies of the most common tokens at the last sampled position, plain vs lade.
    Right: total-variation distance to plain sampling per position, lade vs an independent plain run."""
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.3), gridspec_kw={"width_ratios": [1.5, 1]})
    last = int(dist["position"].max())
    at = dist[(dist["position"] == last) & dist["sampler"].isin(["plain", "lade"])]
    freq = at.groupby("sampler")["token"].value_counts(normalize=True).rename("frequency").reset_index()
    tokens = list(freq[freq["sampler"] == "plain"].nlargest(top, "frequency")["token"])
    freq = freq[freq["token"].isin(tokens)].copy()
    texts = at.drop_duplicates("token").set_index("token")["text"].map(repr)
    freq["token text"] = freq["token"].map(texts)
    order = [texts[t] for t in tokens]
    sns.barplot(data=freq, x="token text", y="frequency", hue="sampler", order=order, hue_order=["plain", "lade"],
                palette={"plain": "0.6", "lade": MEASURED}, ax=axes[0])
    axes[0].set(xlabel=f"token at position {last + 1}", ylabel="empirical frequency",
                title=f"top {top} tokens at position {last + 1}")
    axes[0].tick_params(axis="x", labelrotation=45, labelsize=7)
    sns.lineplot(data=tv.assign(position=tv["position"] + 1), x="position", y="tv_distance", hue="sampler",
                 style="sampler", markers=True, palette={"lade": MEASURED, "plain (independent seeds)": "0.55"},
                 ax=axes[1])
    axes[1].set(xlabel="generated token position", ylabel="total-variation distance to plain sampling",
                title="lade vs noise floor (plain vs plain)")
    axes[1].set_ylim(bottom=0)
    fig.suptitle(heading)
    fig.tight_layout()
    return fig


def ablation_plot(table: pd.DataFrame, order: Sequence[str], heading: str) -> plt.Figure:
    """Per ablation variant: this run's median speedup and compression (blue) beside the paper's (grey hatched)."""
    table = table.set_index("variant").reindex(order).reset_index()
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.6))
    y = np.arange(len(table))
    for ax, ours, paper, label in ((axes[0], "speedup_median", "published_speedup", "speedup over greedy (x)"),
                                   (axes[1], "compression_mean", "published_compression", "compression (tokens/step)")):
        ax.barh(y - 0.2, table[ours], 0.4, **MEASURED_BAR, label="measured (this run)")
        ax.barh(y + 0.2, table[paper].fillna(0), 0.4, **PUBLISHED_BAR, label="published (Llama-2-7B, A100)")
        for i, (a, b) in enumerate(zip(table[ours], table[paper])):
            ax.text(a, i - 0.2, f" {a:.2f}", va="center", fontsize=8)
            if pd.notna(b):
                ax.text(b, i + 0.2, f" {b:.2f}", va="center", fontsize=8)
        ax.set_yticks(y, table["variant"] if ax is axes[0] else [""] * len(y))
        ax.invert_yaxis()
        ax.set_xlabel(label)
        _unity(ax, horizontal=False)
    axes[0].legend(fontsize=8, loc="lower right")
    fig.suptitle(heading)
    fig.tight_layout()
    return fig


def speedup_by_model(summary: pd.DataFrame, published_rows: pd.DataFrame, heading: str) -> plt.Figure:
    """Several models (one per spec entry): published speedups per model (hatched grey) beside this run's median
    speedup and mean compression per model and method (blue shades)."""
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4), gridspec_kw={"width_ratios": [1, 1.4, 1.4]})
    _published_panel(axes[0], published_rows)
    measured = summary[summary["method"] != "greedy"]
    palette = sns.light_palette(MEASURED, n_colors=measured["method"].nunique() + 1)[1:]
    for ax, column, label in ((axes[1], "speedup_median", "speedup over greedy (x), median"),
                              (axes[2], "compression_mean", "compression (tokens per forward)")):
        sns.barplot(data=measured, x="model", y=column, hue="method", palette=palette, ax=ax)
        for container in ax.containers:
            ax.bar_label(container, fmt="%.2f", fontsize=7)
        ax.set(xlabel="", ylabel=label, title="reproduced (this run)" if column == "speedup_median" else "")
        ax.tick_params(axis="x", labelsize=8, labelrotation=15)
        ax.legend(fontsize=7, title="method")
    _unity(axes[1])
    fig.suptitle(heading)
    fig.tight_layout()
    return fig


def spec_bench_plot(summary: pd.DataFrame, leaderboard: pd.DataFrame, labels: dict[str, str],
                    heading: str) -> plt.Figure:
    """Spec-Bench per task. Left: the published leaderboard's Lookahead (solid) and PLD (dashed) speedups per setup
    (grey). Middle: this run's median speedup per task and method (blue shades). Right: this run's compression per
    task beside the leaderboard's mean accepted tokens (overall, grey lines)."""
    tasks = [t for t in labels if t != "overall" and t in set(summary["task"])]
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.8), gridspec_kw={"width_ratios": [1.2, 1.4, 1.2]})
    ax = axes[0]
    setups = list(dict.fromkeys(leaderboard["setup"]))
    greys = sns.color_palette("Greys", len(setups) + 2)[2:]
    for color, setup in zip(greys, setups):
        for method, style in (("lookahead", "-"), ("pld", "--")):
            rows = leaderboard[(leaderboard["setup"] == setup) & (leaderboard["method"] == method)]
            rows = rows.set_index("task").reindex(list(labels)).dropna(subset=["speedup"])
            ax.plot([labels[t] for t in rows.index], rows["speedup"], style, marker="D", ms=4, color=color,
                    label=f"{method}: {setup}")
    ax.set(ylabel="speedup over greedy (x)", title="published (Spec-Bench leaderboard, fp16)")
    ax.tick_params(axis="x", labelsize=7, labelrotation=30)
    ax.legend(fontsize=6, ncol=1)
    _unity(ax)
    measured = summary[summary["method"] != "greedy"].copy()
    measured["label"] = measured["task"].map(labels)
    several = measured["model"].nunique() > 1
    measured["series"] = measured["model"] + ": " + measured["method"] if several else measured["method"]
    palette = sns.light_palette(MEASURED, n_colors=measured["series"].nunique() + 1)[1:]
    order = [labels[t] for t in tasks]
    for ax, column, label in ((axes[1], "speedup_median", "speedup over greedy (x), median"),
                              (axes[2], "compression_mean", "compression (tokens per forward)")):
        sns.barplot(data=measured, x="label", y=column, hue="series", order=order, palette=palette, ax=ax)
        ax.set(xlabel="", ylabel=label, title="reproduced (this run)" if column == "speedup_median" else "")
        ax.tick_params(axis="x", labelsize=7, labelrotation=30)
        ax.legend(fontsize=7)
    _unity(axes[1])
    overall = leaderboard[leaderboard["task"] == "overall"]
    for color, (_, row) in zip(sns.color_palette("Greys", len(overall) + 2)[2:], overall.iterrows()):
        axes[2].axhline(row["mean_accepted_tokens"], color=color, lw=1, ls=":", zorder=0)
    axes[2].text(0.01, 0.98, "grey dotted: published mean accepted tokens (overall)", transform=axes[2].transAxes,
                 fontsize=7, va="top")
    fig.suptitle(heading)
    fig.tight_layout()
    return fig
