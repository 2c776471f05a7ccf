"""The one sampling harness (lab.studies.experiments.run_sampling), used by notebook 05 and `python -m
lab.studies.sampling_bench`."""

import pandas as pd
import pytest
import torch

from lab.harness.bench import REPEATS
from lab.harness.models import load_model
from lab.harness.stats import aa_name
from lab.studies.experiments import SAMPLING_COLUMNS, run_sampling
from lab.studies.sampling_bench import main
from lade.config import LookaheadConfig
from tiny_hub import save_tiny_chat_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    folder = save_tiny_chat_model(tmp_path_factory.mktemp("tiny_chat"))
    torch.set_num_threads(1)
    return folder, *load_model(str(folder))


def test_rows_pair_every_method_with_plain_sampling(tiny):
    """One row per (prompt set, prompt, temperature, method) in the results schema, plus plain's A/A row; EOS is off
    so every run emits max_new_tokens; plain sampling is each speedup's reference (so its own speedup is exactly 1);
    every method times each prompt REPEATS times (its median repeat's time is the row's)."""
    _, model, tok = tiny
    config = LookaheadConfig(window_size=2, ngram_size=3, guess_set_size=2)
    df = run_sampling(model, tok, ("mt_bench", "humaneval"), [0.7], config, 2, 8, sampled_window=True)
    assert list(df.columns) == list(SAMPLING_COLUMNS)
    assert len(df) == 2 * 2 * 4
    assert set(df["method"]) == {"plain", "lade", "lade+sampled-window", aa_name("plain")}
    assert (df["new_tokens"] == 8).all()
    assert (df.loc[df["method"] == "plain", "speedup"] == 1.0).all()
    assert (df["wall_s_repeats"].map(len) == REPEATS).all() and df.attrs["provenance"]["params"]["repeats"] == REPEATS
    assert all(row.wall_s in row.wall_s_repeats for row in df[df["method"] != aa_name("plain")].itertuples())
    aa = df[df["method"] == aa_name("plain")]
    assert (aa["speedup"] == aa["wall_s_repeats"].str[0] / aa["wall_s_repeats"].str[1]).all()
    summary = pd.DataFrame(df.attrs["summary"])
    assert set(summary["prompt_set"]) == {"mt_bench", "humaneval"} and "compression_low" in summary


def test_one_repeat_has_no_aa_row(tiny):
    """repeats=1: one timing per (prompt, method), no A/A row; repeats below 1 are refused before any run."""
    _, model, tok = tiny
    config = LookaheadConfig(window_size=2, ngram_size=3, guess_set_size=2)
    df = run_sampling(model, tok, "mt_bench", [1.0], config, 1, 4, repeats=1)
    assert list(df["method"]) == ["plain", "lade"] and (df["wall_s_repeats"].map(len) == 1).all()
    with pytest.raises(ValueError, match="repeats"):
        run_sampling(model, tok, "mt_bench", [1.0], config, 1, 4, repeats=0)


def test_cli_prints_the_summary(tiny, capsys):
    """`python -m lab.studies.sampling_bench` runs the same harness and prints its per-set summary."""
    folder, *_ = tiny
    main(["--model", str(folder), "--temperatures", "1.0", "--per-set", "1", "--max-new-tokens", "6",
          "--config", "3,2,2", "--threads", "1"])
    printed = capsys.readouterr().out
    assert "lade+sampled-window" in printed and "speedup_low" in printed
