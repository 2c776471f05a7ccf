"""lab.harness.results: what save_results writes, load_results reads back; timed rows from before every repeat was
kept read as one repeat each, and rows averaged over several repeats are left as written."""

from __future__ import annotations

import pandas as pd

from lab.harness.results import load_results, save_results


def _rows(repeats: int | None) -> pd.DataFrame:
    df = pd.DataFrame({"method": ["greedy", "lade"], "prompt_id": ["0", "0"], "wall_s": [2.0, 1.0]})
    params = {"per_model": {"m": {"repeats": repeats}}} if repeats is not None else {}
    df.attrs["provenance"] = {"params": params}
    return df


def test_rows_timed_once_read_as_one_repeat_without_an_aa_row(tmp_path):
    for repeats in (None, 1):
        df = load_results(save_results(_rows(repeats), tmp_path / f"old{repeats}.jsonl"))
        assert list(df["wall_s_repeats"]) == [[2.0], [1.0]]
        assert df["reference_wall_s"].isna().all() and not df["method"].str.endswith("(A/A)").any()


def test_rows_averaged_over_repeats_and_new_rows_are_left_as_written(tmp_path):
    averaged = load_results(save_results(_rows(3), tmp_path / "averaged.jsonl"))
    assert "wall_s_repeats" not in averaged.columns
    new = _rows(None).assign(wall_s_repeats=[[2.0, 2.2, 1.9], [1.0, 1.1, 0.9]], reference_wall_s=[None, None])
    back = load_results(save_results(new, tmp_path / "new.csv"))
    assert list(back["wall_s_repeats"]) == [[2.0, 2.2, 1.9], [1.0, 1.1, 0.9]]
