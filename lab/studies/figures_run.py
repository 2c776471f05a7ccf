"""Figures of notebooks 05-07: the sampling distribution check, the ablation and Spec-Bench per task. Style and
saving as in lab.harness.figure_style."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from lab.harness.figure_style import (
    MEASURED,
    MEASURED_BAR,
    OKABE_ITO,
    PUBLISHED,
    PUBLISHED_BAR,
    dots,
    errorbars,
    interval_errors,
    legend_below,
    measured_on,
    unity,
)
from lab.harness.methods import reference_method
from lab.harness.stats import is_aa

NOISE_DRAWS = 200  # resampled pairs behind the sampling-noise band
TASK_LABELS = {"mt_bench": "multi-turn\nconversation", "translation": "translation", "summarization": "summarization",
               "qa": "question\nanswering", "math_reasoning": "math\nreasoning", "rag": "retrieval-aug.\ngeneration",
               "overall": "overall"}  # Spec-Bench task key -> axis label


def _grouped_bars(ax: plt.Axes, measured: pd.DataFrame, groups: Sequence[str], group_column: str, series: str,
                  column: str, points: pd.DataFrame | None = None) -> None:
    """One bar per (group, series) with its 95% interval (where n >= MIN_INTERVAL): groups along x, series side by
    side in Okabe-Ito colours; `points` (rows with the same group, series and value columns): each single prompt as
    a dot on its bar."""
    names = list(dict.fromkeys(measured[series]))
    width = 0.8 / max(len(names), 1)
    for k, (name, color) in enumerate(zip(names, OKABE_ITO)):
        part = measured[measured[series] == name].set_index(group_column).reindex(groups).reset_index()
        xs = np.arange(len(groups)) - 0.4 + width * (k + 0.5)
        ax.bar(xs, part[column], width, color=color, alpha=0.85, label=name)
        errorbars(ax, xs, part[column], interval_errors(part, column))
        if points is not None:
            mine = points[points[series] == name]
            for x, group in zip(xs, groups):
                dots(ax, x, mine.loc[mine[group_column] == group, column], 0.5 * width)
    ax.set_xticks(np.arange(len(groups)), [str(g) for g in groups], fontsize=7, rotation=25, ha="right",
                  rotation_mode="anchor")


def noise_band(dist: pd.DataFrame, reference: str = "plain", draws: int = NOISE_DRAWS) -> pd.DataFrame:
    """Per position: the 2.5%, 50% and 97.5% quantiles of the total-variation distance between two samples of the
    reference sampler's size drawn from its own empirical distribution (what sampling noise alone gives; fixed
    seed, so re-plotting is identical)."""
    rng = np.random.default_rng(0)
    rows = []
    for position, part in dist[dist["sampler"] == reference].groupby("position"):
        tokens = part["token"].to_numpy()
        values, inverse = np.unique(tokens, return_inverse=True)
        tv = []
        for _ in range(draws):
            a = np.bincount(rng.choice(inverse, len(tokens)), minlength=len(values)) / len(tokens)
            b = np.bincount(rng.choice(inverse, len(tokens)), minlength=len(values)) / len(tokens)
            tv.append(0.5 * np.abs(a - b).sum())
        low, mid, high = np.quantile(tv, [0.025, 0.5, 0.975])
        rows.append({"position": int(position), "low": low, "median": mid, "high": high})
    return pd.DataFrame(rows)


def distribution_plot(dist: pd.DataFrame, tv: pd.DataFrame, heading: str, top: int = 10) -> plt.Figure:
    """Left: empirical frequencies of the most common tokens at the last sampled position, plain vs lade.
    Right: total-variation distance to plain sampling per position for lade and for plain with other seeds,
    against the band that sampling noise alone gives (two resampled plain samples of the same size)."""
    fig, axes = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [1.4, 1]})
    last = int(dist["position"].max())
    at = dist[(dist["position"] == last) & dist["sampler"].isin(["plain", "lade"])]
    freq = at.groupby("sampler")["token"].value_counts(normalize=True).rename("frequency").reset_index()
    tokens = list(freq[freq["sampler"] == "plain"].nlargest(top, "frequency")["token"])
    freq = freq[freq["token"].isin(tokens)].copy()
    texts = at.drop_duplicates("token").set_index("token")["text"].map(
        lambda t: repr(str(t))[1:-1].replace(" ", "\u2423") or "''")
    freq["token text"] = freq["token"].map(texts)
    sns.barplot(data=freq, x="token text", y="frequency", hue="sampler", order=[texts[t] for t in tokens],
                hue_order=["plain", "lade"], palette={"plain": "0.6", "lade": MEASURED}, ax=axes[0], errorbar=None,
                legend=False)
    axes[0].set(xlabel=f"token at position {last + 1} (grey: plain, blue: lade)", ylabel="empirical frequency",
                title=f"top {top} tokens at position {last + 1}")
    axes[0].tick_params(axis="x", labelrotation=40, labelsize=9)
    for label in axes[0].get_xticklabels():
        label.set_horizontalalignment("right")
        label.set_rotation_mode("anchor")
    band = noise_band(dist)
    axes[1].fill_between(band["position"] + 1, band["low"], band["high"], color="0.8", lw=0,
                         label=f"sampling noise: two plain samples of the same size (95% band, {NOISE_DRAWS} draws)")
    for sampler, color, marker in (("lade", MEASURED, "o"), ("plain (independent seeds)", PUBLISHED, "s")):
        part = tv[tv["sampler"] == sampler]
        axes[1].plot(part["position"] + 1, part["tv_distance"], marker=marker, color=color, label=f"{sampler} vs plain")
    axes[1].set(xlabel="generated token position", ylabel="total-variation distance to plain sampling",
                title="lade vs the sampling-noise band", ylim=(0, None))
    axes[1].set_xticks(sorted(band["position"] + 1))
    legend_below(fig, axes[1], ncol=1)
    fig.suptitle(heading)
    return fig


def ablation_plot(table: pd.DataFrame, order: Sequence[str], heading: str) -> plt.Figure:
    """Per ablation variant, speedup (top) and compression (bottom): the paper's numbers (left, grey hatched,
    marked unverified where the CSV says so) and this run's (right, blue, 95% intervals where n >= 5), in
    separate panels on a shared scale."""
    table = table.set_index("variant").reindex(order).reset_index()
    here = measured_on(table) or "this run"
    status = table.get("published_verified", pd.Series(dtype=str)).dropna().astype(str)
    unverified = status.str.startswith("unverified").any()
    paper = "published: Llama-2-7B-chat, A100, fp16"
    paper += "\n(unverified: from a secondary summary)" if unverified else ""
    fig, axes = plt.subplots(2, 2, figsize=(13, 7), sharey=True)
    y = np.arange(len(table))
    for row, (ours, published, label) in enumerate((("speedup", "published_speedup", "speedup over greedy (x)"),
                                                    ("compression", "published_compression",
                                                     "compression (tokens per step)"))):
        top = 1.25 * np.nanmax([table[f"{ours}_high"].max(), table[ours].max(), table[published].max(), 1.0])
        left, right = axes[row]
        has = table[published].notna()
        left.barh(y[has], table.loc[has, published], 0.6, **PUBLISHED_BAR,
                  label="published" + (" (unverified)" if unverified else ""))
        right.barh(y, table[ours], 0.6, **MEASURED_BAR, label="measured here (95% interval where n >= 5)")
        errors = interval_errors(table, ours)
        errorbars(right, table[ours], y, errors, horizontal=True)
        ends = table[ours].to_numpy(float) + errors[1]  # a label starts past its interval, never under it
        for ax, values, at in ((left, table[published], table[published]), (right, table[ours], ends)):
            for i, (v, x) in enumerate(zip(values, at)):
                if pd.notna(v):
                    ax.annotate(f"{v:.2f}", (x, i), va="center", fontsize=8, xytext=(5, 0), textcoords="offset points")
            ax.set(xlim=(0, top), xlabel=label)
            unity(ax, horizontal=False)
        for i in np.flatnonzero(~has.to_numpy()):
            left.annotate("not in the paper", (0, i), va="center", fontsize=8, xytext=(3, 0),
                          textcoords="offset points",
                          color="0.4")
        left.set_yticks(y, table["variant"])
        if row == 0:
            left.set_title(paper, fontsize=9)
            right.set_title(f"measured here: {here}", fontsize=9)
    axes[0][0].invert_yaxis()
    legend_below(fig, [axes[0][0], axes[0][1]], ncol=3)
    fig.suptitle(heading)
    return fig


def spec_bench_plot(summary: pd.DataFrame, leaderboard: pd.DataFrame | None, labels: dict[str, str], heading: str,
                    setup: str = "A100 80GB, Vicuna-7B-v1.3", rows: pd.DataFrame | None = None) -> plt.Figure:
    """Spec-Bench per task. Left: this run's speedup per task and method over its reference (plain greedy, or plain
    beam search; 95% intervals where n >= 5), the leaderboard's Lookahead and PLD speedups of one published setup
    (fp16) as grey markers. Right: this run's compression per task, that setup's overall mean accepted tokens as
    grey lines. leaderboard None: this run alone. `rows` (the results file's rows): each prompt as a dot on its bar."""
    tasks = [t for t in labels if t != "overall" and t in set(summary["task"])]
    reference = reference_method(summary["method"])
    measured = summary[summary["method"] != reference].copy()
    several = measured["model"].nunique() > 1
    measured["series"] = measured["model"] + ": " + measured["method"] if several else measured["method"]
    points = None
    if rows is not None:
        points = rows[rows["method"] != reference].assign(task=lambda d: d["prompt_set"].str.partition(":")[2])
        points["series"] = points["model"] + ": " + points["method"] if several else points["method"]
    fig, axes = plt.subplots(1, 2, figsize=(15, 5.6))
    over = "greedy" if reference == "greedy" else f"plain beam search, {reference}"
    for ax, column, label in ((axes[0], "speedup", f"speedup over {over} (x, ratio of total times)"),
                              (axes[1], "compression", "compression (new tokens per forward)")):
        _grouped_bars(ax, measured, tasks, "task", "series", column, points)
        ax.set_xticks(np.arange(len(tasks)), [labels[t] for t in tasks], fontsize=8, rotation=0, ha="center")
        ax.set(ylabel=label)
    board = leaderboard[leaderboard["setup"] == setup] if leaderboard is not None else pd.DataFrame(
        columns=["method", "task", "speedup", "mean_accepted_tokens"])
    styles = {"lookahead": ("D", "0.2", "Lookahead", ":"), "pld": ("s", "0.55", "PLD", "-.")}
    for method, (marker, grey, name, ls) in styles.items():
        rows = board[board["method"] == method].set_index("task")
        if rows.empty:
            continue
        axes[0].plot(np.arange(len(tasks)), rows.reindex(tasks)["speedup"], marker, color=grey, mec="black", ms=6,
                     ls="none", zorder=6, label=f"published {name} (Spec-Bench leaderboard: {setup}, fp16)")
        if "overall" in rows.index and pd.notna(rows.loc["overall", "mean_accepted_tokens"]):
            axes[1].axhline(rows.loc["overall", "mean_accepted_tokens"], color=grey, lw=1.2, ls=ls, zorder=3,
                            label=f"published {name}: mean accepted tokens, all tasks ({setup}, fp16)")
    unity(axes[0])
    legend_below(fig, axes, ncol=3)
    fig.suptitle(heading)
    return fig


def corpus_plot(summary: pd.DataFrame, heading: str, rows: pd.DataFrame | None = None,
                labels: dict[str, str] | None = None) -> plt.Figure:
    """Left: lade auto's speedup over greedy per Spec-Bench task, one bar per corpus size (no corpus, then the
    earlier requests of the same task in it; 95% intervals where n >= 5). Right: two-turn MT-Bench, lade auto without
    and with the corpus of first turns. `rows` (the results file's rows): each prompt as a dot on its bar; `labels`:
    task key -> name (default: Spec-Bench's task names)."""
    labels = {**TASK_LABELS, **(labels or {})}
    fig, axes = plt.subplots(1, 2, figsize=(14, 5.4), gridspec_kw={"width_ratios": [3, 1]})
    measured = (summary["method"] != "greedy") & ~summary["method"].map(is_aa)  # the A/A rows: the two-turn panel
    spec = summary[(summary["workload"] == "spec_bench") & measured].copy()
    spec["corpus"] = [f"corpus of {int(n)} earlier requests" if n > 0 else "no corpus"
                      for n in spec["corpus_requests"]]
    spec = spec.sort_values("corpus_requests", kind="stable")
    tasks = list(dict.fromkeys(summary.loc[summary["workload"] == "spec_bench", "task"]))
    points = None
    if rows is not None:
        points = rows[(rows["workload"] == "spec_bench") & (rows["method"] != "greedy")
                      & ~rows["method"].map(is_aa)].copy()
        points["task"] = points["prompt_set"].str.partition(":")[2]
        points["corpus"] = [f"corpus of {int(n)} earlier requests" if n > 0 else "no corpus"
                            for n in points["corpus_requests"]]
    _grouped_bars(axes[0], spec, tasks, "task", "corpus", "speedup", points)
    axes[0].set_xticks(np.arange(len(tasks)), [labels.get(t, t) for t in tasks], fontsize=8, rotation=0,
                       ha="center")
    axes[0].set(xlabel="Spec-Bench task", ylabel="speedup over greedy (x)", ylim=(0, None))
    two = summary[(summary["workload"] == "two_turns") & (summary["method"] != "greedy")]
    axes[1].bar(np.arange(len(two)), two["speedup"], **MEASURED_BAR)
    errorbars(axes[1], np.arange(len(two)), two["speedup"], interval_errors(two, "speedup"))
    if rows is not None:
        for x, method in enumerate(two["method"]):
            dots(axes[1], x, rows.loc[(rows["workload"] == "two_turns") & (rows["method"] == method), "speedup"], 0.3)
    axes[1].set_xticks(np.arange(len(two)), list(two["method"]), fontsize=8, rotation=15, ha="right")
    axes[1].set(ylabel="speedup over greedy (x)", title="MT-Bench turn 2 after turn 1", ylim=(0, None))
    for ax in axes:
        unity(ax)
    legend_below(fig, list(axes), ncol=4)
    fig.suptitle(heading)
    return fig
