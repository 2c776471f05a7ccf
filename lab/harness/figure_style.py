"""The figures' shared style and helpers: colours, titles, tick labels, the y = 1 line, group headers that keep
published and measured numbers apart, single prompts as dots, and `save` (PNG + PDF stamped with provenance).

Visual language (same in every figure; Okabe-Ito colours, safe for colour-blind readers): published numbers are
grey hatched bars or grey markers, in their own group or panel with their device and precision named; numbers
measured in this run are blue; modelled numbers are orange. A measured mean carries its 95% bootstrap interval over
prompts (lab.harness.stats) only where it rests on at least MIN_INTERVAL prompts; single prompts are small dots at
fixed offsets. Re-plotting the same results gives byte-identical files (no timestamps, no random jitter).
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

from lab.harness.models import EMBEDDED_ALIASES, EMBEDDED_NAME
from lab.harness.paths import figures_dir

OKABE_ITO = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
MEASURED = OKABE_ITO[0]
MODELLED = OKABE_ITO[1]
PUBLISHED = "0.45"
PUBLISHED_BAR = dict(color="0.88", edgecolor="0.35", hatch="//")
MEASURED_BAR = dict(color=MEASURED, edgecolor=MEASURED, alpha=0.85)
ERRORBAR = dict(fmt="none", ecolor="0.1", elinewidth=1.2, capsize=3, zorder=4)
MIN_INTERVAL = 5  # prompts below which a mean gets no interval (its single prompts are shown instead)
GROUP_HEADER = "group-header"  # gid of the text naming a bar group's source, device and precision
UNITY = "unity"  # gid of the y = 1 (no speedup) line
STAMP = "results-commit"  # gid of the title whose last line names the commit of the results a figure draws
PREDICTED_HATCH = "xx"  # hatch of bars (and label prefix "predicted") for numbers the cost model predicts


def setup_style() -> None:
    """The notebooks' one set-up: the plot style, and pandas showing whole tables (every column, three decimals, one
    block wide rather than wrapped)."""
    pd.set_option("display.max_columns", None, "display.width", 250, "display.expand_frame_repr", False,
                  "display.precision", 3, "display.max_colwidth", 60)
    sns.set_theme(style="whitegrid", context="notebook", font_scale=0.95, palette=list(OKABE_ITO))
    plt.rcParams.update({"figure.dpi": 100, "savefig.bbox": "tight", "axes.titleweight": "bold",
                         "figure.constrained_layout.use": True, "svg.hashsalt": "lade"})


def model_label(model: str, dtype: str | None = None) -> str:
    """The model's own name ('embedded' is SmolLM2-135M-Instruct; a folder or Hub id by its last part; a free-text
    label such as 'Llama-2 7B/13B' stays as it is)."""
    text = str(model)
    name = EMBEDDED_NAME if text.lower() in EMBEDDED_ALIASES else text if " " in text else Path(text).name or text
    return f"{name}, {precision(dtype)}" if dtype else name


def precision(dtype: Any) -> str:
    """'torch.float32' or 'float32' -> 'fp32' (bfloat16 -> bf16)."""
    return str(dtype).replace("torch.", "").replace("bfloat", "bf").replace("float", "fp")


def measured_on(rows: pd.DataFrame) -> str:
    """'<device>, <precision>' of a results table, from its provenance (df.attrs); '' when it has none."""
    prov = rows.attrs.get("provenance") or {}
    dtype = (prov.get("params") or {}).get("dtype")
    return ", ".join(p for p in (prov.get("device"), precision(dtype) if dtype else None) if p)


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


def count_range(value: int | dict) -> str:
    """A prompt count as a title states it: "5", or "2-5" for counts per set ({set: count})."""
    if not isinstance(value, dict):
        return str(value)
    low, high = min(value.values()), max(value.values())
    return str(low) if low == high else f"{low}-{high}"


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


def save(fig: plt.Figure, name: str, quick: bool, provenance: Mapping[str, Any]) -> list[Path]:
    """Write `<figures>/<name>.png` and `.pdf` (no timestamps: the same figure gives the same bytes), each stamped
    with the provenance of the results it draws (commit, dirty flag, weights digest). Returns both paths."""
    note = provenance_note(provenance)
    stamp(fig, provenance)
    clean_ticks(fig)
    base = figures_dir(quick) / name
    paths = [base.with_suffix(".png"), base.with_suffix(".pdf")]
    fig.savefig(paths[0], dpi=150, metadata={"Description": note})
    fig.savefig(paths[1], metadata={"CreationDate": None, "Subject": note})
    return paths


def provenance_note(prov: Mapping[str, Any]) -> str:
    """'git <commit>[ (dirty)][; weights sha256 <digest>]'; a record that is not a provenance record (no
    git_commit entry) is refused: a figure must say which run it draws ('git unknown' outside a git checkout)."""
    if not isinstance(prov, Mapping) or "git_commit" not in prov:
        raise ValueError("figures.save needs the provenance of the results it draws (a record with git_commit, as "
                         "load_results(...).attrs['provenance']): pass it as the fourth argument")
    params = prov.get("params") or {}
    parts = [f"git {prov['git_commit'] or 'unknown'}" + (" (dirty)" if prov.get("git_dirty") else "")]
    if params.get("weights_sha256"):
        parts.append(f"weights sha256 {params['weights_sha256']}")
    return "; ".join(parts)


def commit_label(prov: Mapping[str, Any]) -> str:
    """'results: commit ef75d82' (+ ', dirty tree' when the run's checkout had uncommitted changes)."""
    provenance_note(prov)  # the same refusal as save's for a record without a commit
    commit = str(prov["git_commit"] or "unknown")[:7]
    return f"results: commit {commit}" + (", dirty tree" if prov.get("git_dirty") else "")


def stamp(fig: plt.Figure, prov: Mapping[str, Any]) -> None:
    """Write the results' commit (commit_label) visibly as the last line of the figure's title, where the layout
    keeps it clear of axes and legends whatever their width; stamping again replaces that line."""
    heading = fig._suptitle.get_text() if fig._suptitle is not None else ""  # matplotlib keeps the suptitle here
    lines = [line for line in heading.split("\n") if not line.startswith("results: commit ")]
    fig.suptitle("\n".join([*filter(None, lines), commit_label(prov)]))
    fig._suptitle.set_gid(STAMP)


def unity(ax: plt.Axes, horizontal: bool = True, label: str = "1x: no speedup") -> None:
    """The y = 1 (x = 1) line of a speedup axis: no speedup. Drawn above bars so that it shows through them."""
    draw = ax.axhline if horizontal else ax.axvline
    draw(1.0, color="0.1", lw=1.1, ls="--", zorder=3.5, gid=UNITY, label=label)


def group_header(ax: plt.Axes, x: float, text: str) -> None:
    """A bar group's heading (source, device, precision) just above the axes, centred at data x."""
    ax.annotate(text, (x, 1.0), xycoords=("data", "axes fraction"), xytext=(0, 3), textcoords="offset points",
                ha="center", va="bottom", fontsize=7.5, color="0.25", gid=GROUP_HEADER)


def separator(ax: plt.Axes, x: float) -> None:
    """A vertical rule between bar groups of different sources."""
    ax.axvline(x, color="0.35", lw=1.0, ls="-", zorder=1, gid="separator")


def interval_errors(table: pd.DataFrame, column: str) -> np.ndarray:
    """[2, n] distances from `column` to its `_low` / `_high` interval bounds (0 where there is no interval, or
    where the row rests on fewer than MIN_INTERVAL prompts)."""
    low, high = table[f"{column}_low"].to_numpy(float), table[f"{column}_high"].to_numpy(float)
    value = table[column].to_numpy(float)
    errors = np.nan_to_num(np.vstack([value - low, high - value]), nan=0.0).clip(min=0.0)
    if "prompts" in table.columns:
        errors[:, table["prompts"].to_numpy(float) < MIN_INTERVAL] = 0.0
    return errors


def errorbars(ax: plt.Axes, x: Sequence[float], y: Sequence[float], errors: np.ndarray, horizontal: bool = False,
              **style: Any) -> None:
    """Interval bars (`errors` [2, n] from interval_errors) where an interval exists; none for the others."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    keep = errors.sum(axis=0) > 0
    if keep.any():
        bars = {"xerr" if horizontal else "yerr": errors[:, keep]}
        ax.errorbar(x[keep], y[keep], **bars, **{**ERRORBAR, **style})


def dots(ax: plt.Axes, x: float, values: Sequence[float], width: float = 0.25, cap: float | None = None,
         unit: str = "prompts", color: str = "0.15") -> None:
    """Single prompts as small dots at fixed, evenly spread offsets around x (no random jitter); values above `cap`
    sit on the cap as a triangle with their value written beside them, so one outlier does not stretch the axis."""
    values = np.asarray(list(values), float)
    offsets = np.linspace(-width / 2, width / 2, len(values)) if len(values) > 1 else np.zeros(len(values))
    inside = values <= cap if cap is not None else np.ones(len(values), bool)
    ax.plot(offsets[inside] + x, values[inside], "o", color=color, ms=2.5, zorder=5, label=f"single {unit}")
    if (~inside).any():
        ax.plot(offsets[~inside] + x, np.full((~inside).sum(), cap), "^", color=color, ms=4, zorder=5,
                label=f"single {unit} beyond the axis (value written)", clip_on=False)
        ax.annotate(", ".join(f"{v:.1f}" for v in sorted(values[~inside], reverse=True)[:2]), (x, cap),
                    xytext=(4, -2), textcoords="offset points", fontsize=6.5, va="top", ha="left")


def capped_limit(bars: Sequence[float], points: Sequence[float], margin: float = 1.15) -> float:
    """An axis top that shows every bar and its interval and the bulk of the single prompts (up to twice the
    highest bar); prompts beyond it are drawn on the cap by `dots`."""
    bars = np.asarray([b for b in bars if np.isfinite(b)], float)
    points = np.asarray([p for p in points if np.isfinite(p)], float)
    top = bars.max() if bars.size else 1.0
    if points.size:
        top = max(top, min(points.max(), 2.0 * top))
    return margin * top


def legend_below(fig: plt.Figure, ax: plt.Axes | Sequence[plt.Axes], ncol: int = 3) -> None:
    """One legend under the figure for the labelled artists of `ax` (one axes or several), each label once."""
    handles, labels = [], []
    for one in [ax] if isinstance(ax, plt.Axes) else ax:
        h, lab = one.get_legend_handles_labels()
        handles, labels = handles + h, labels + lab
    unique = {label: h for h, label in zip(handles, labels) if not label.startswith("_")}
    if unique:
        fig.legend(unique.values(), unique.keys(), loc="outside lower center", ncol=ncol, fontsize=8, frameon=False)
