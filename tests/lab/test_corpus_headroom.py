"""The corpus headroom (lab/studies/corpus_headroom.py): the oracle copier's steps on hand-made requests, its bounds (a
corpus
never costs steps, a longer anchor never saves any), and the CLI's rows on a tiny chat model."""

import random

import pandas as pd
import pytest
import torch

from lab.harness.prompts import load_prompts
from lab.harness.results import load_results
from lab.studies import corpus_headroom as ch
from tiny_hub import save_tiny_chat_model


def test_ngrams_up_to_the_longest():
    assert ch.ngrams([1, 2, 3], 2) == {(1,), (2,), (3,), (1, 2), (2, 3)}
    assert ch.ngrams([], 3) == set()


def test_an_output_never_seen_takes_a_step_per_token():
    assert ch.oracle_steps([7, 8, 1, 2, 3, 4], 2, anchor=1, depth=8) == 4


def test_an_output_repeating_its_prompt_is_copied():
    """Prompt 1..5, output 1..5: the first step finds no match after 5, takes 1; the second copies 2..5 after 1."""
    tokens = [1, 2, 3, 4, 5, 1, 2, 3, 4, 5]
    assert ch.oracle_steps(tokens, 5, anchor=1, depth=8) == 2
    assert ch.oracle_steps(tokens, 5, anchor=1, depth=2) == 3  # 1 | 2 3 4 | 5
    assert ch.oracle_steps(tokens, 5, anchor=2, depth=8) == 3  # 1 | 2 (after "5 1": none; "1 2" next) | 3 4 5


def test_a_corpus_supplies_what_the_request_never_saw():
    corpus = ch.ngrams([9, 1, 2, 3, 4], 9)
    assert ch.oracle_steps([9, 1, 2, 3, 4], 1, 1, 8) == 4
    assert ch.oracle_steps([9, 1, 2, 3, 4], 1, 1, 8, corpus) == 1


def test_a_corpus_never_costs_steps_and_a_longer_anchor_never_saves_any():
    rng = random.Random(0)
    for _ in range(50):
        tokens = [rng.randrange(4) for _ in range(60)]
        corpus = ch.ngrams([rng.randrange(4) for _ in range(80)], 4 + 6)
        for anchor in (1, 2, 3):
            own, with_corpus = (ch.oracle_steps(tokens, 20, anchor, 6, c) for c in (None, corpus))
            assert with_corpus <= own <= 40
            assert own <= ch.oracle_steps(tokens, 20, anchor + 1, 6)


@pytest.mark.parametrize("args", [(0, 4, 0), (1, -1, 0), (1, 4, 99)])
def test_bad_arguments_are_refused(args):
    anchor, depth, start = args
    with pytest.raises(ValueError, match="need anchor >= 1"):
        ch.oracle_steps([1, 2, 3], start, anchor, depth)


def test_rows_and_summary_pool_the_tasks():
    """Prompt 5, output 1 2 3 4, a corpus of 1 2 3 4 after other prompts: anchored on one token the oracle takes 1,
    then copies 2 3 4; anchored on two it needs "1 2" first."""
    requests = [([5, 1, 2, 3, 4], 1), ([6, 1, 2, 3, 4], 1), ([7, 1, 2, 3, 4], 1)]
    table = pd.DataFrame(ch.headroom_rows("t", requests, ["a"], 2, anchors=(1, 2), depth=4))
    assert list(table.columns) == list(ch.HEADROOM_COLUMNS)
    assert table[["anchor", "steps_own", "steps_corpus", "corpus_requests"]].values.tolist() == [[1, 4, 2, 2],
                                                                                              [2, 4, 3, 2]]
    summary = ch.summarize_headroom(pd.concat([table, table.assign(task="u")]))
    pooled = summary[(summary["task"] == "all") & (summary["anchor"] == 1)].iloc[0]
    assert pooled["questions"] == 2 and pooled["gain"] == 2.0 and pooled["own+corpus"] == 2.0


def test_the_cli_measures_the_first_questions_against_the_next(tmp_path):
    torch.set_num_threads(1)
    folder = save_tiny_chat_model(tmp_path / "tiny")
    out = tmp_path / "headroom.jsonl"
    ch.main(["--model", str(folder), "--tasks", "qa,rag", "--n-prompts", "2", "--size", "3", "--anchors", "1,2",
             "--max-new-tokens", "6", "--out", str(out)])
    rows = load_results(out)
    assert list(rows.columns) == list(ch.HEADROOM_COLUMNS) and len(rows) == 2 * 2 * 2
    assert list(rows[rows["task"] == "qa"]["prompt_id"].unique()) == [
        str(i) for i in load_prompts("spec_bench:qa", 2)["id"]]
    assert (rows["corpus_requests"] == 3).all() and (rows["steps_corpus"] <= rows["steps_own"]).all()
    assert rows.attrs["provenance"]["params"]["size"] == 3
    with pytest.raises(SystemExit):
        ch.main(["--anchors", "0"])
