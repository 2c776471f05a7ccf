"""Results files of the research harness: rows as .jsonl or .csv, their provenance beside them as
`<file>.provenance.json`. One writer and one reader for every table (benchmark rows and other tables alike)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

TEXT_COLUMNS = ("prompt_id", "config")  # read back as strings ("" for a missing config)


def save_results(df: pd.DataFrame, path: str | Path) -> Path:
    """Write rows as .jsonl or .csv, and `df.attrs` (provenance) beside them as `<path>.provenance.json`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".csv":
        df.to_csv(path, index=False)
    elif path.suffix == ".jsonl":
        df.to_json(path, orient="records", lines=True)
    else:
        raise ValueError(f"results path must end in .jsonl or .csv, got {path.name!r}")
    Path(f"{path}.provenance.json").write_text(json.dumps(df.attrs, indent=2, default=str))
    return path


def load_results(path: str | Path) -> pd.DataFrame:
    """Read what `save_results` wrote: the rows, with `df.attrs` from the provenance file."""
    path = Path(path)
    if path.suffix == ".csv":
        df = pd.read_csv(path, keep_default_na=False, na_values=[""])
    else:
        df = pd.read_json(path, orient="records", lines=True)
    for column in TEXT_COLUMNS:
        if column in df.columns:
            df[column] = df[column].fillna("").astype(str)
    for column in [c for c in df.columns if c.endswith("_repeats")]:  # lists (a .csv holds their text)
        df[column] = pd.Series([json.loads(v) if isinstance(v, str) else v for v in df[column]], index=df.index,
                               dtype=object)
    meta = Path(f"{path}.provenance.json")
    if meta.exists():
        df.attrs.update(json.loads(meta.read_text()))
    return _with_repeat_columns(df)


def _with_repeat_columns(df: pd.DataFrame) -> pd.DataFrame:
    """Timed rows written before each repeat was kept (lab.harness.bench.REPEATS) timed every prompt once: their
    `wall_s_repeats` is that one time and they have no A/A row (`reference_wall_s` empty). Rows whose provenance
    records more than one repeat (times averaged then) are left as they are."""
    if "wall_s" not in df.columns or "wall_s_repeats" in df.columns or _recorded_repeats(df.attrs) > 1:
        return df
    df["wall_s_repeats"] = pd.Series([[w] for w in df["wall_s"]], index=df.index, dtype=object)
    df["reference_wall_s"] = None
    return df


def _recorded_repeats(record) -> int:
    """The largest `repeats` anywhere in a provenance record (1 where none is recorded)."""
    if isinstance(record, dict):
        own = record.get("repeats")
        return max([own if isinstance(own, int) else 1, *(_recorded_repeats(v) for v in record.values())])
    if isinstance(record, list):
        return max([1, *(_recorded_repeats(v) for v in record)])
    return 1


def report(summary: pd.DataFrame, df: pd.DataFrame, out: str | Path | None) -> None:
    """A benchmark CLI's ending: its summary table printed, and its rows saved to `out` when given."""
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.precision", 3):
        print(summary.to_string(index=False))
    if out is not None:
        print(f"wrote {save_results(df, out)}")
