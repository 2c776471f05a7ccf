"""Figures of notebook 09: lookahead against plain batched greedy per batch size, measured (speedup, compression per
row, tokens computed per forward) and predicted for GPU classes by the cost model. Style and saving as in
lab.harness.figure_style."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from lab.harness.batched import POOLED
from lab.harness.figure_style import (
    MIN_INTERVAL,
    MODELLED,
    OKABE_ITO,
    dots,
    errorbars,
    interval_errors,
    legend_below,
    measured_on,
    unity,
)

SET_LABELS = {"mt_bench": "MT-Bench", "humaneval": "HumanEval", "spec_bench": "Spec-Bench", POOLED: "all sets"}
LINESTYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "D", "^", "v", "P", "X", "*")


def _series_label(name: str, part: pd.DataFrame) -> str:
    counts = "/".join(str(int(n)) for n in part["batches"])
    return f"{SET_LABELS.get(name, name)} (batches per size: {counts})"


def _styles(names: Sequence[str]) -> dict[str, tuple[str, str]]:
    """name -> (colour, marker), the same in every panel: every set pooled in black, the sets in Okabe-Ito order."""
    sets = [n for n in dict.fromkeys(names) if n != POOLED]
    styles = {name: (OKABE_ITO[k % len(OKABE_ITO)], MARKERS[(k + 1) % len(MARKERS)]) for k, name in enumerate(sets)}
    return {POOLED: ("0.1", MARKERS[0]), **styles}


def _offsets(count: int) -> np.ndarray:
    return 0.12 * (np.arange(count) - (count - 1) / 2)


def _measured_panel(ax: plt.Axes, summary: pd.DataFrame, rows: pd.DataFrame, sizes: list[int], column: str) -> None:
    """One line per prompt set over the batch sizes (nudged apart along x): the estimate with its 95% interval where
    it rests on at least MIN_INTERVAL batches, its single batches as dots otherwise (the pooled line's single batches
    are the sets' dots)."""
    styles = _styles(summary["prompt_set"])
    names = [n for n in styles if n in set(summary["prompt_set"])]
    if len(names) == 2 and POOLED in names:  # one set: pooling it gives the same batches again
        names.remove(POOLED)
    for name, shift in zip(names, _offsets(len(names))):
        color, marker = styles[name]
        part = summary[summary["prompt_set"] == name].set_index("batch_size").reindex(sizes).reset_index()
        xs = np.arange(len(sizes)) + shift
        ax.plot(xs, part[column], marker=marker, color=color, lw=1.4, ms=5, label=_series_label(name, part))
        errorbars(ax, xs, part[column], interval_errors(part.rename(columns={"batches": "prompts"}), column),
                  ecolor=color)
        for x, size, n in zip(xs, sizes, part["batches"]):
            if n < MIN_INTERVAL and name != POOLED:
                mine = rows[(rows["prompt_set"] == name) & (rows["batch_size"] == size)]
                dots(ax, x, mine[column], 0.08, unit="batches")
    ax.set_xticks(np.arange(len(sizes)), [str(s) for s in sizes])
    ax.set(xlabel="batch size (rows per forward)")


def batch_throughput_plot(summary: pd.DataFrame, rows: pd.DataFrame, widths: pd.DataFrame, method: str,
                          heading: str) -> plt.Figure:
    """Left: throughput of `method` over plain batched greedy per batch size and prompt set (and every set pooled),
    ratio of total times on the same batches. Middle: its compression per row (tokens per forward per row). Right: the
    tokens the model computed per forward (median and 10-90% range over forwards) beside a plain batched step's."""
    summary = summary[summary["method"] == method]
    rows = rows[rows["method"] == method]
    widths = widths[widths["method"] == method]
    sizes = sorted(summary["batch_size"].unique())
    fig, axes = plt.subplots(1, 3, figsize=(16, 5.2))
    _measured_panel(axes[0], summary, rows, sizes, "speedup")
    axes[0].set(ylabel="speedup over plain batched greedy (x)", ylim=(0, None))
    unity(axes[0], label="1x: as fast as plain batched greedy")
    _measured_panel(axes[1], summary, rows, sizes, "compression")
    axes[1].set(ylabel="compression (tokens per forward per row)", ylim=(0, None))
    styles = _styles(widths["prompt_set"])
    sets = [n for n in styles if n != POOLED and n in set(widths["prompt_set"])]
    for name, shift in zip(sets, _offsets(len(sets))):
        color, marker = styles[name]
        part = widths[widths["prompt_set"] == name].set_index("batch_size").reindex(sizes).reset_index()
        xs = np.arange(len(sizes)) + shift
        axes[2].plot(xs, part["q50"], marker=marker, color=color, lw=1.4, ms=5,
                     label=f"{SET_LABELS.get(name, name)}: median over forwards")
        axes[2].vlines(xs, part["q10"], part["q90"], color=color, lw=2.5, alpha=0.45)
    axes[2].plot(np.arange(len(sizes)), sizes, color="0.45", ls=(0, (1, 1.5)), lw=2.0, marker="|", ms=8,
                 label="plain batched step: one token per row")
    axes[2].plot([], [], color="0.5", lw=2.5, alpha=0.45, label="10-90% of the forwards")
    axes[2].set_yscale("log", base=2)
    axes[2].set_xticks(np.arange(len(sizes)), [str(s) for s in sizes])
    axes[2].set(xlabel="batch size (rows per forward)", ylabel="tokens per forward (rows x widest row)")
    for ax in axes:
        ax.set_xlim(-0.5, len(sizes) - 0.5)
    here = measured_on(rows) or "this run"
    axes[1].set_title(f"measured here: {here}", fontsize=9)
    legend_below(fig, list(axes), ncol=3)
    fig.suptitle(heading)
    return fig


def batch_prediction_plot(curve: pd.DataFrame, model: str, task: str, heading: str,
                          choices: Sequence[str] = ("fixed", "batch-aware")) -> plt.Figure:
    """Predicted (modelled, not measured) throughput of lookahead over plain batched decoding per batch size for
    `model` and `task`: one small panel per GPU class on a shared scale, one dashed orange-family line per choice
    (lab.studies.gpu_model.predict_batches) with its 95% band, so that no two classes share a line or a band."""
    part = curve[(curve["model"] == model) & (curve["task"] == task)]
    sizes = sorted(part["batch_size"].unique())
    gpus = list(dict.fromkeys(part["gpu"]))
    ncols = min(len(gpus), 5)
    nrows = -(-len(gpus) // ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.1 * ncols + 0.6, 2.6 * nrows + 1.6), sharex=True, sharey=True,
                             squeeze=False)
    top = 1.1 * max(part["speedup_high"].max(), 1.0)
    styles = dict(zip(choices, ((MODELLED, "o", "--"), (OKABE_ITO[3], "s", ":"))))
    for ax, name in zip(axes.ravel(), gpus):
        for choice in choices:
            line = part[(part["gpu"] == name) & (part["choice"] == choice)].set_index("batch_size").reindex(sizes)
            color, marker, style = styles.get(choice, (MODELLED, "o", "--"))
            ax.plot(sizes, line["speedup"], marker=marker, color=color, ls=style, lw=1.4, ms=4,
                    label=f"predicted: {_choice_title(choice)}")
            ax.fill_between(sizes, line["speedup_low"], line["speedup_high"], color=color, alpha=0.15, lw=0,
                            label=f"predicted 95% band (calibration error): {choice}")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(s) for s in sizes])
        ax.set(ylim=(0, top))
        ax.set_title(f"{name} (predicted)", fontsize=9)
        unity(ax, label="1x: as fast as plain batched decoding")
    for ax in axes[:, 0]:
        ax.set_ylabel("predicted speedup (x)")
    for ax in axes[-1, :]:
        ax.set_xlabel("batch size (rows per forward)")
        ax.tick_params(labelbottom=True)
    for ax in axes.ravel()[len(gpus):]:
        ax.set_visible(False)
    legend_below(fig, list(axes.ravel()[: len(gpus)]), ncol=3)
    fig.suptitle(heading)
    return fig


def _choice_title(choice: str) -> str:
    return {"fixed": "the config fastest at batch 1, kept at every batch size",
            "batch-aware": "the fastest config at each batch size, or plain decoding"}.get(choice, choice)
