"""The one sampling harness (lab.studies.experiments.run_sampling), used by notebook 05 and `python -m
lab.studies.sampling_bench`."""

import pandas as pd
import pytest
import torch

from lab.harness.models import load_model
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
    """One row per (prompt set, prompt, temperature, method) in the results schema; EOS is off so every run emits
    max_new_tokens; plain sampling is each speedup's reference (so its own speedup is exactly 1)."""
    _, model, tok = tiny
    config = LookaheadConfig(window_size=2, ngram_size=3, guess_set_size=2)
    df = run_sampling(model, tok, ("mt_bench", "humaneval"), [0.7], config, 2, 8, sampled_window=True)
    assert list(df.columns) == list(SAMPLING_COLUMNS)
    assert len(df) == 2 * 2 * 3
    assert set(df["method"]) == {"plain", "lade", "lade+sampled-window"}
    assert (df["new_tokens"] == 8).all()
    assert (df.loc[df["method"] == "plain", "speedup"] == 1.0).all()
    summary = pd.DataFrame(df.attrs["summary"])
    assert set(summary["prompt_set"]) == {"mt_bench", "humaneval"} and "compression_low" in summary


def test_cli_prints_the_summary(tiny, capsys):
    """`python -m lab.studies.sampling_bench` runs the same harness and prints its per-set summary."""
    folder, *_ = tiny
    main(["--model", str(folder), "--temperatures", "1.0", "--per-set", "1", "--max-new-tokens", "6",
          "--config", "3,2,2", "--threads", "1"])
    printed = capsys.readouterr().out
    assert "lade+sampled-window" in printed and "speedup_low" in printed
