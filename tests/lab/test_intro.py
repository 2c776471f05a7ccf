"""A notebook's intro sentence names what its committed run did, generated from the results file (lab.harness.intro):
no method, prompt set or size the run lacks, every one it has. The stale prose it replaces named pld(10) in notebooks
01-02, methods notebook 07's results lack, three prompt sets where notebook 09 ran one, and corpora its run lacked."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from lab.harness.intro import listing, run_intro
from lab.harness.paths import REPO
from lab.harness.results import load_results, save_results
from lab.studies import batches, corpus, spec_bench, speedup

RESULTS = REPO / "data" / "results"
CASES = [(speedup.intro, "mt_bench.jsonl"), (speedup.intro, "humaneval.jsonl"), (spec_bench.intro, "spec_bench.jsonl"),
         (batches.intro, "batches.jsonl"), (corpus.intro, "corpus.jsonl")]


@pytest.mark.parametrize(("intro", "name"), CASES, ids=[name for _, name in CASES])
def test_intro_names_exactly_the_committed_run(intro, name):
    """Every method and prompt set of the committed results is named, and no method outside them."""
    rows = load_results(RESULTS / name)
    text = intro(RESULTS / name)
    assert set(re.findall(r"`([^`]+)`", text)) - {name} == set(rows["method"])
    assert all(f"{s} (" in text for s in rows["prompt_set"].unique())


def test_sizes_come_from_the_run():
    """Notebook 09's batch sizes are those its rows ran; notebook 10's corpus sizes those its provenance records."""
    rows = load_results(RESULTS / "batches.jsonl")
    assert f"batch sizes {listing(sorted(rows['batch_size'].unique()))};" in batches.intro(RESULTS / "batches.jsonl")
    sizes = load_results(RESULTS / "corpus.jsonl").attrs["provenance"]["params"]["sizes"]
    assert f"corpus sizes {listing(sorted(sizes))};" in corpus.intro(RESULTS / "corpus.jsonl")


def test_run_intro_counts_prompts_per_set(tmp_path):
    """Counts are distinct prompts per set (repeats of a prompt by several methods count once), and a set with one
    prompt reads '1 prompt'."""
    rows = pd.DataFrame({"prompt_set": ["a", "a", "a", "b"], "prompt_id": ["1", "1", "2", "9"],
                         "method": ["greedy", "lade", "greedy", "greedy"]})
    rows.attrs["provenance"] = {"params": {"max_new_tokens": 7}}
    save_results(rows, tmp_path / "r.jsonl")
    expected = "This run: `greedy` and `lade` on a (2 prompts) and b (1 prompt); at most 7 new tokens per prompt"
    assert run_intro(tmp_path / "r.jsonl") == expected + " (from `r.jsonl`)."
    assert listing([]) == "nothing" and listing(["x"]) == "x" and listing("abc") == "a, b and c"
