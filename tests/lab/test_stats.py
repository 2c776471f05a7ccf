"""The one definition of compression and speedup, and the bootstrap intervals around them (lab.harness.stats)."""

import numpy as np
import pandas as pd
import pytest

from lab.harness.stats import (
    MIN_INTERVAL_N,
    aa_name,
    aa_row,
    compression,
    interval,
    interval_or_points,
    median_repeat,
    speedup,
    summarize_runs,
)


def test_definitions_on_known_counts():
    """Token-weighted compression is not the mean of per-prompt ratios: 300 tokens in 100 forwards plus 10 tokens in
    10 forwards is 310 / 110, where the per-prompt mean would say 2.0. Speedup is the ratio of total throughputs."""
    assert compression([300, 10], [100, 10]) == pytest.approx(310 / 110)
    assert speedup([100, 100], [10.0, 30.0], [100, 100], [5.0, 35.0]) == pytest.approx(40 / 40)
    assert speedup([100, 50], [10.0, 10.0], [100, 50], [5.0, 5.0]) == pytest.approx(2.0)


def test_interval_covers_the_truth_about_95_percent_of_the_time():
    """Seeded simulation: 40 prompts with new tokens ~ N(100, 20^2) and forwards ~ N(60, 10^2), so the token-weighted
    compression estimates 100 / 60. Over 300 data sets the 95% interval must hold 100/60 in about 95% of them
    (binomial sd at 300 repetitions is 1.3 points; the bootstrap of a ratio from 40 prompts runs 1-2 points below
    nominal)."""
    rng = np.random.default_rng(2024)
    hits = 0
    for i in range(300):
        sample = (rng.normal(100, 20, 40), rng.normal(60, 10, 40))
        low, high = interval(compression, sample, n_resamples=999, seed=i)
        hits += low <= 100 / 60 <= high
    assert 0.90 <= hits / 300 <= 0.98


def test_interval_edge_cases():
    """Fewer than MIN_INTERVAL_N prompts give no interval; identical prompts give a zero-width one; ragged samples
    are refused."""
    assert all(np.isnan(interval(compression, ([10.0], [5.0]))))
    assert all(np.isnan(interval(compression, ([10.0, 12.0, 9.0, 11.0], [5.0, 5.0, 4.0, 6.0]))))
    assert interval(compression, ([10.0] * MIN_INTERVAL_N, [5.0] * MIN_INTERVAL_N)) == (2.0, 2.0)
    with pytest.raises(ValueError, match="one length"):
        interval(compression, ([1.0, 2.0], [1.0]))


def _runs(walls: dict[str, list[float]], calls: dict[str, list[int]]) -> pd.DataFrame:
    return pd.DataFrame([{"prompt_set": "s", "prompt_id": str(i), "method": m, "new_tokens": 64, "wall_s": w,
                          "forward_calls": calls[m][i]} for m, ws in walls.items() for i, w in enumerate(ws)])


def test_summarize_runs_pairs_prompts_with_their_reference():
    """The method's time on each prompt is set against greedy's time on the same prompt; a prompt without a greedy
    row is an error, not a silent drop."""
    runs = _runs({"greedy": [2.0, 4.0, 6.0, 3.0, 5.0], "fast": [1.0, 2.0, 3.0, 1.5, 2.5]},
                 {"greedy": [64] * 5, "fast": [32, 30, 34, 31, 33]})
    out = summarize_runs(runs).set_index("method")
    assert out.loc["fast", "speedup"] == pytest.approx(2.0)
    assert out.loc["fast", "speedup_low"] == out.loc["fast", "speedup_high"] == pytest.approx(2.0)
    assert out.loc["fast", "compression"] == pytest.approx(320 / 160)
    assert out.loc["fast", "compression_low"] < 2.0 < out.loc["fast", "compression_high"]
    with pytest.raises(ValueError, match="no 'greedy' row"):
        summarize_runs(runs[~((runs["method"] == "greedy") & (runs["prompt_id"] == "1"))])
    with pytest.raises(ValueError, match="lack columns"):
        summarize_runs(runs.drop(columns="wall_s"))


def test_summarize_runs_gives_no_interval_below_the_minimum():
    """Two prompts: the point estimate, but NaN ends (show the points instead)."""
    runs = _runs({"greedy": [2.0, 4.0], "fast": [1.0, 3.0]}, {"greedy": [64, 64], "fast": [32, 30]})
    row = summarize_runs(runs).set_index("method").loc["fast"]
    assert row["speedup"] == pytest.approx(6.0 / 4.0)
    assert np.isnan(row["speedup_low"]) and np.isnan(row["speedup_high"]) and np.isnan(row["compression_low"])


def test_aa_row_is_paired_with_its_own_reference_time():
    """The A/A row's speedup is its reference_wall_s (the reference's first repeat) over its wall_s (the second),
    not the reference row's median."""
    runs = _runs({"greedy": [2.0] * 5, "fast": [1.0] * 5}, {"greedy": [64] * 5, "fast": [32] * 5})
    runs["reference_wall_s"] = None
    aa = _runs({aa_name("greedy"): [2.2, 1.8, 2.0, 2.0, 2.0]}, {aa_name("greedy"): [64] * 5})
    aa["reference_wall_s"] = [2.0, 2.0, 2.0, 2.0, 2.0]
    out = summarize_runs(pd.concat([runs, aa], ignore_index=True)).set_index("method")
    assert aa_name("greedy") == "greedy (A/A)"
    assert out.loc["greedy (A/A)", "speedup"] == pytest.approx(10.0 / 10.0)
    assert out.loc["greedy (A/A)", "speedup_low"] < 1.0 < out.loc["greedy (A/A)", "speedup_high"]
    assert out.loc["fast", "speedup"] == pytest.approx(2.0)


def test_aa_row_builds_the_noise_ratio_from_the_first_two_repeats():
    """One rule for every harness: the A/A row is the reference row renamed, timed by its second repeat against its
    first (speedup = first / second, tokens/s from the second); forward time and host share are set only for rows
    that record forward time, so batched and sampling rows (which have none) gain no such columns."""
    reference = {"method": "greedy", "new_tokens": 64, "wall_s": 2.0, "wall_s_repeats": [2.0, 1.6, 2.4],
                 "reference_wall_s": None, "forward_calls": 64, "speedup": 1.0}
    plain = aa_row(reference)
    assert plain == reference | {"method": "greedy (A/A)", "wall_s": 1.6, "reference_wall_s": 2.0,
                                 "tokens_per_s": 64 / 1.6, "speedup": pytest.approx(2.0 / 1.6)}
    timed = aa_row(reference | {"forward_s": 1.5, "host_share": 0.25}, second_forward_s=1.2)
    assert timed["forward_s"] == 1.2 and timed["host_share"] == pytest.approx(1 - 1.2 / 1.6)
    with pytest.raises(ValueError, match="two or more repeats"):
        aa_row(reference | {"wall_s_repeats": [2.0]})


def test_median_repeat():
    """A row takes its median repeat's times (the lower median for an even count): one disturbed run does not move
    them."""
    assert median_repeat([1.0, 9.0, 1.2]) == 2
    assert median_repeat([2.0]) == 0 and median_repeat([4.0, 1.0, 3.0, 2.0]) == 3
    with pytest.raises(ValueError, match="at least one"):
        median_repeat([])


def test_interval_or_points():
    """Below MIN_INTERVAL_N values: the estimate and the points, no interval; from it on: a percentile interval
    around the estimate."""
    few = interval_or_points([1.1, 1.3])
    assert few.n == 2 and not few.has_interval and few.low is None and few.points == (1.1, 1.3)
    assert few.estimate == pytest.approx(1.2)
    assert few.text() == "1.20 (n = 2: 1.10, 1.30)"
    many = interval_or_points([1.0, 1.1, 1.2, 1.3, 1.4, 1.5])
    assert many.has_interval and many.low <= many.estimate <= many.high and many.n == 6
    assert many.text().endswith("(n = 6)") and "[" in many.text()
    with pytest.raises(ValueError, match="non-empty"):
        interval_or_points([])
