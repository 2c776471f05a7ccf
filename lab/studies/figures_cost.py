"""Figures of notebook 04 (the cost model): step cost vs tokens per step, calibrated speedup per GPU class, the
RTX 3090 case, the calibration against published numbers and the validation on this device. Style, colours and
saving as in lab.studies.figures."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from lab.harness.figure_style import (
    ERRORBAR,
    MEASURED,
    MIN_INTERVAL,
    MODELLED,
    OKABE_ITO,
    PUBLISHED,
    PUBLISHED_BAR,
    legend_below,
    measured_on,
    title,
    unity,
)
from lab.harness.stats import Z95
from lab.studies import calibration as cal

LINESTYLES = ("-", "--", "-.", ":")
UNVERIFIED = "unverified published value (paper table, from a secondary summary)"


def _subtitled(heading: str, model: str, data: str, device: str) -> str:
    """`heading` with the model | data | device line of figure_style.title, unless the caller already gave one."""
    return heading if "\nmodel:" in heading else title(heading, model, data, device)


def _published_gpus(rows: pd.DataFrame) -> str:
    return f"published runs on {rows['gpu'].nunique()} GPU classes"


def unverified_points() -> set[str]:
    """Points of data/published/gpu_lookahead.csv whose value could not be checked against its primary source."""
    table = cal.load_published()
    return set(table.loc[table["verified"].astype(str).str.startswith("unverified"), "point"])


def _gpu_styles(gpus: list[str]) -> dict[str, dict]:
    """A colour and line style per GPU class (8 colours x 4 styles: distinguishable without colour too)."""
    return {g: {"color": OKABE_ITO[i % len(OKABE_ITO)], "ls": LINESTYLES[(i // len(OKABE_ITO)) % 4]}
            for i, g in enumerate(gpus)} if len(gpus) <= len(OKABE_ITO) * 4 else {}


def _diagonal(ax: plt.Axes, values: np.ndarray) -> None:
    low, high = np.nanmin(values) * 0.9, np.nanmax(values) * 1.1
    ax.plot([low, high], [low, high], color="0.3", lw=1, ls="--", label="y = x", zorder=0)
    ax.set_xlim(low, high)
    ax.set_ylim(low, high)


def latency_plot(curves: pd.DataFrame, measured: pd.DataFrame, published: pd.DataFrame, model: str,
                 measured_label: str, heading: str) -> plt.Figure:
    """One panel per GPU class: the modelled cost of a q-token lookahead step relative to a plain step for `model`
    with its 95% band, and the published step costs of that class (compression / speedup, where both are
    published). Last panel: the latency measured on this device, on its own axes."""
    rows = curves[curves["model"] == model]
    gpus = list(dict.fromkeys(rows["gpu"]))
    ncols = 4
    nrows = -(-(len(gpus) + 1) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.6 * ncols, 2.7 * nrows + 0.8), sharex=True)
    axes = axes.ravel()
    top = max(rows["relative_high"].max(), published["relative"].max() if len(published) else 0)
    unverified = unverified_points()
    for ax, gpu in zip(axes, gpus):
        g = rows[rows["gpu"] == gpu]
        ax.fill_between(g["q"], np.maximum(g["relative_low"], 1.0), g["relative_high"], color=MODELLED, alpha=0.25,
                        lw=0, label="modelled, 95% band (cut at 1: a wider step never costs less than a plain one)")
        ax.plot(g["q"], g["relative"], color=MODELLED, lw=1.8, label=f"modelled: {model} fp16")
        for attention, marker in (("eager", "D"), ("flash", "s")):
            points = published[(published["gpu"] == gpu) & (published["attention"] == attention)]
            doubtful = points["point"].isin(unverified)
            for chosen, style, label in ((~doubtful, dict(color=PUBLISHED), "published: compression / speedup"),
                                         (doubtful, dict(mfc="white"), UNVERIFIED)):
                if chosen.any():
                    ax.plot(points.loc[chosen, "q"], points.loc[chosen, "relative"], marker, mec="black", ms=6,
                            ls="none", zorder=5, label=f"{label} ({attention} attention)", **style)
        ax.set(xscale="log", ylim=(0, 1.08 * top), title=gpu)
        unity(ax, label="1: the cost of a plain step")
    for ax in axes[: len(gpus)]:
        ax.set_ylabel("step cost / plain step")
    ax = axes[len(gpus)]
    ax.plot(measured["q"], measured["relative"], "o-", color=MEASURED, lw=1.8, ms=4, label="measured on this device")
    ax.set(xscale="log", title=f"measured: {measured_label}", ylabel="latency(q) / latency(1)")
    ax.title.set_fontsize(8)
    unity(ax, label="1: the cost of a plain step")
    for ax in axes[len(gpus) + 1:]:
        ax.set_visible(False)
    for ax in axes[-ncols:]:
        ax.set_xlabel("tokens fed per step q (log)")
    for ax in axes:
        ax.tick_params(labelbottom=True)
    handles = {}
    for ax in axes[: len(gpus) + 1]:
        for h, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, h)
    fig.legend(handles.values(), handles.keys(), loc="outside lower center", ncol=3, fontsize=8, frameon=False)
    fig.suptitle(heading)
    return fig


def gpu_speedup_heatmap(predictions: pd.DataFrame, best: pd.DataFrame, task: str, heading: str) -> plt.Figure:
    """Calibrated speedup per GPU class x config with its 95% band, one panel per model (stacked; each shows only
    the GPU classes that hold the model's fp16 weights, blank cells where a config's cache does not fit); a black
    frame marks the recommended config, 'pub' a published measurement of the same cell ('pub?' where that value is
    unverified); * marks GPU classes with published speedups (the others use the transfer rule and its error)."""
    rows = predictions[predictions["task"] == task]
    models = list(dict.fromkeys(rows["model"]))
    gpus = list(dict.fromkeys(rows["gpu"]))
    size = rows.groupby("config")["step_tokens"].max()
    configs = sorted(dict.fromkeys(rows["config"]), key=lambda c: (size[c], c))
    calibrated = set(predictions.loc[predictions["sigma_source"] == "leave-one-out", "gpu"])
    doubtful = unverified_points()
    fits = {m: [g for g in gpus if rows[(rows["model"] == m) & (rows["gpu"] == g)]["fits_memory"].any()]
            for m in models}
    models = [m for m in models if fits[m]]  # a model no class holds has nothing to show
    heights = [len(fits[m]) + 1.2 for m in models]
    fig, axes = plt.subplots(len(models), 1, figsize=(max(1.25 * len(configs) + 4, 9), 0.55 * sum(heights) + 1.6),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)
    axes = axes.ravel()
    norm = plt.matplotlib.colors.TwoSlopeNorm(vcenter=1.0, vmin=0.4, vmax=2.2)
    for ax, model in zip(axes, models):
        part = rows[rows["model"] == model].set_index(["gpu", "config"])
        mine = fits[model]
        grid = np.full((len(mine), len(configs)), np.nan)
        for i, g in enumerate(mine):
            for j, c in enumerate(configs):
                r = part.loc[(g, c)]
                if not r["fits_memory"]:
                    continue
                grid[i, j] = r["speedup"]
                pub = pd.notna(r["published_speedup"])
                ax.text(j, i - (0.25 if pub else 0.14), f"{r['speedup']:.2f}", ha="center", va="center", fontsize=9,
                        weight="bold")
                ax.text(j, i + (0.05 if pub else 0.2), f"{r['speedup_low']:.2f}-{r['speedup_high']:.2f}",
                        ha="center", va="center", fontsize=7.5)
                if pub:
                    mark = "pub?" if r.get("published_point", "") in doubtful else "pub"
                    ax.text(j, i + 0.32, f"{mark} {r['published_speedup']:.2f}", ha="center", va="center",
                            fontsize=7.5)
        image = ax.imshow(grid, cmap="PuOr", norm=norm, aspect="auto")
        chosen = best[(best["model"] == model) & (best["task"] == task)]
        for r in chosen.itertuples():
            if r.gpu in mine:
                i, j = mine.index(r.gpu), configs.index(r.config)
                ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, lw=2, ec="black"))
        ax.set_xticks(range(len(configs)), configs, fontsize=8)
        ax.set_yticks(range(len(mine)), [f"{g} *" if g in calibrated else g for g in mine], fontsize=8)
        hidden = len(gpus) - len(mine)
        ax.set_title(f"{model}, predicted" + (f" ({hidden} GPU classes without room for its fp16 weights left out;"
                                              " blank: does not fit)" if hidden else ""), fontsize=9)
        ax.set(xlabel="config N,W,G")
        ax.grid(False)
    bar = fig.colorbar(image, ax=axes.tolist(), label="predicted speedup over greedy (x), 95% band below",
                       shrink=0.6)
    unity(bar.ax)
    note = ("*: GPU class with published speedups (leave-one-out band); others: transfer band\n"
            "pub: published speedup of that cell (pub?: unverified); frame: recommended config")
    fig.suptitle(f"{heading}\n{note}")
    return fig


def rtx3090_plot(case: pd.DataFrame, heading: str) -> plt.Figure:
    """Published RTX 3090 speedups (grey) beside the model's leave-one-out predictions (orange, 95% band)."""
    fig, ax = plt.subplots(figsize=(9, 4.8))
    x = np.arange(len(case))
    ax.bar(x - 0.2, case["published"], 0.4, **PUBLISHED_BAR, label="published")
    yerr = np.vstack([case["predicted_loo"] - case["predicted_low"], case["predicted_high"] - case["predicted_loo"]])
    ax.bar(x + 0.2, case["predicted_loo"], 0.4, color="white", edgecolor=MODELLED, lw=2,
           label="predicted without that point (leave-one-out), 95% band")
    ax.errorbar(x + 0.2, case["predicted_loo"], yerr=yerr, **ERRORBAR)
    for i, r in enumerate(case.itertuples()):
        ax.annotate(f"{r.published:.2f}x", (i - 0.2, r.published), ha="center", va="bottom", fontsize=8,
                    xytext=(0, 2), textcoords="offset points")
        ax.annotate(f"{r.predicted_loo:.2f}x", (i + 0.2, r.predicted_high), ha="center", va="bottom", fontsize=8,
                    xytext=(0, 2), textcoords="offset points")
    ax.set_xticks(x, [f"{r.point}\nN,W,G={r.config}, q={r.step_tokens}\n{r.dataset}" for r in case.itertuples()],
                  fontsize=7)
    ax.set(ylabel="speedup over greedy (x)")
    ax.set_ylim(0, 1.2 * max(case["predicted_high"].max(), case["published"].max()))
    unity(ax)
    legend_below(fig, ax, ncol=2)
    fig.suptitle(_subtitled(heading, "Llama-2-7B / Vicuna-7B, fp16", f"{len(case)} published speedups",
                            "RTX 3090"))
    return fig


def calibration_plot(loo: pd.DataFrame, heading: str, worst: int = 3) -> plt.Figure:
    """Published values against the model's leave-one-out predictions (each fitted without the point it predicts)
    with 95% bands (sigma_loo), one panel per kind (speedup, compression, plain-greedy tokens/s), each on its own
    scale. The `worst` points of each panel are numbered, and named with their error in the panel's top-left
    corner; hollow markers are unverified published values."""
    kinds = [k for k in ("speedup", "compression", "baseline") if (loo["kind"] == k).any()]
    fig, axes = plt.subplots(1, len(kinds), figsize=(5.2 * len(kinds), 5.6), squeeze=False)
    axes = axes.ravel()
    gpus = list(dict.fromkeys(loo["gpu"]))
    styles = _gpu_styles(gpus)
    markers = dict(zip(gpus, ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">", "h")))
    doubtful = unverified_points()
    names = {"speedup": ("published speedup over greedy (x)", "predicted speedup (x), leave-one-out"),
             "compression": ("published compression (tokens per step)", "predicted compression, leave-one-out"),
             "baseline": ("published plain greedy tokens/s", "predicted tokens/s, leave-one-out")}
    for ax, kind in zip(axes, kinds):
        part = loo[loo["kind"] == kind]
        for r in part.itertuples():
            band = np.exp(Z95 * r.sigma_loo)
            err = [[r.predicted_loo - r.predicted_loo / band], [r.predicted_loo * band - r.predicted_loo]]
            hollow = r.point in doubtful
            ax.errorbar(r.published, r.predicted_loo, yerr=err, fmt=markers.get(r.gpu, "o"),
                        color=styles[r.gpu]["color"], mfc="white" if hollow else styles[r.gpu]["color"], ms=6,
                        capsize=2, label=r.gpu + (" (hollow: unverified published value)" if hollow else ""))
        bands = np.exp(Z95 * part["sigma_loo"])
        _diagonal(ax, np.concatenate([part["published"], part["predicted_loo"] / bands, part["predicted_loo"] * bands]))
        order = part.assign(size=part["error_loo"].abs()).nlargest(worst, "size")
        for k, r in enumerate(order.itertuples()):  # numbered beside the point, named in the corner
            ax.annotate(str(k + 1), (r.published, r.predicted_loo), xytext=(5, -3 - 4 * k), textcoords="offset points",
                        fontsize=7, weight="bold", ha="left", va="top")
        ax.text(0.03, 0.97, "\n".join(f"{k + 1}: {r.point}, {100 * r.error_loo:+.0f}%"
                                       for k, r in enumerate(order.itertuples())),
                transform=ax.transAxes, fontsize=7, ha="left", va="top", color="0.2")
        error = part["error_loo"].abs()
        ax.set_title(f"{kind}: median |error| {100 * error.median():.0f}%, worst {100 * error.max():.0f}% "
                     f"(n={len(part)})", fontsize=9)
        ax.set(xlabel=names[kind][0], ylabel=names[kind][1])
        if kind == "speedup":
            unity(ax)
            unity(ax, horizontal=False)
    handles = {}
    for ax in axes:
        for h, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, h)
    fig.legend(handles.values(), handles.keys(), loc="outside lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle(_subtitled(heading, "Llama-2 / CodeLlama / Vicuna, fp16 (published)",
                            f"{len(loo)} published values (data/published/gpu_lookahead.csv)", _published_gpus(loo)))
    return fig


def cpu_validation_plot(table: pd.DataFrame, median_error: float, heading: str) -> plt.Figure:
    """Predicted against measured speedup of every measured lookahead run on this device (95% intervals of the
    measurement as horizontal bars where the run has at least MIN_INTERVAL prompts), with y = x and the median
    absolute error."""
    fig, ax = plt.subplots(figsize=(8, 6.4))
    files = list(dict.fromkeys(table["results_file"]))
    for color, name in zip(OKABE_ITO, files):
        part = table[table["results_file"] == name]
        xerr = np.nan_to_num(np.vstack([part["speedup"] - part["speedup_low"],
                                        part["speedup_high"] - part["speedup"]]), nan=0.0).clip(min=0)
        if "prompts" in part:
            xerr[:, part["prompts"].to_numpy(float) < MIN_INTERVAL] = 0.0  # too few prompts for an interval
        for marker, (prompt_set, rows) in zip(("o", "s", "^", "D"), part.groupby("prompt_set", sort=False)):
            sel = part["prompt_set"] == prompt_set
            ax.errorbar(rows["speedup"], rows["predicted_speedup"], xerr=xerr[:, sel.to_numpy()], fmt=marker,
                        color=color, ms=5, capsize=2, elinewidth=0.8, label=f"{name}: {prompt_set}")
    _diagonal(ax, np.concatenate([table["speedup"], table["predicted_speedup"], table["speedup_low"].dropna(),
                                  table["speedup_high"].dropna()]))
    unity(ax)
    unity(ax, horizontal=False)
    ax.set(xlabel="measured speedup over greedy (x, 95% interval over prompts)", ylabel="predicted speedup (x)")
    ax.set_title(f"prediction = measured latency profile x each run's step mix\nmedian |error| "
                 f"{100 * median_error:.1f}% over {len(table)} (config, prompt set) runs", fontsize=10)
    legend_below(fig, ax, ncol=2)
    counts = table["prompts"] if "prompts" in table else pd.Series(dtype=float)
    low, high = (int(counts.min()), int(counts.max())) if len(counts) else (0, 0)
    data = f"{len(table)} runs" + (f", {low}-{high} prompts each" if high > low else f", {high} prompts each"
                                   if high else "")
    fig.suptitle(_subtitled(heading, "as in each run", data, measured_on(table) or "this device"))
    return fig
