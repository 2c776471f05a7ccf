"""Notebook 10's harness (lab/studies/corpus_bench.py) on a tiny chat model: rows in the corpus schema, exact, every
corpus
size measured on the same first questions, the frozen corpus never learning, and the Findings and figure rendered
from the saved results."""

import pytest
import torch

from lab.harness.models import load_model
from lab.harness.prompts import load_prompts
from lab.harness.results import load_results, save_results
from lab.pipeline.manifest import RESULT_SCHEMAS
from lab.studies import corpus_bench as cb
from lab.studies import findings
from lab.studies.figures_run import corpus_plot
from tiny_hub import save_tiny_chat_model


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    torch.set_num_threads(1)
    folder = tmp_path_factory.mktemp("tiny_chat")
    model, tok = load_model(str(save_tiny_chat_model(folder)))
    rows = cb.run_corpus_benchmark(model, tok, ["mt_bench"], [0, 3, 5], n_prompts=2, two_turn_prompts=2,
                                   max_new_tokens=6)
    return save_results(rows, folder / "corpus.jsonl")


def test_rows_follow_the_schema_and_are_exact(saved):
    """Every row has the corpus schema's columns and reproduces greedy; under the default protocol ("preceding") the
    Spec-Bench task measures the two questions after its first 5 (the largest corpus: the 5 lade decoded with
    corpus=) with greedy, auto and auto with the last 3 and all 5 earlier requests; the two-turn set measures turn 2
    with the corpus of both conversations' first turns."""
    rows = load_results(saved)
    assert set(RESULT_SCHEMAS["corpus.jsonl"]) <= set(rows.columns)
    assert rows["matches_greedy"].all()
    spec = rows[rows["workload"] == "spec_bench"]
    assert list(dict.fromkeys(spec["prompt_id"])) == list(load_prompts("spec_bench:mt_bench", 7)["id"])[5:]
    assert dict(zip(spec["method"], spec["corpus_requests"])) == {
        "greedy": -1, "lade-auto": 0, "lade-auto+corpus(3)": 3, "lade-auto+corpus(5)": 5, "greedy (A/A)": -1}
    assert rows.attrs["provenance"]["params"]["protocol"] == "preceding"
    two = rows[rows["workload"] == "two_turns"]
    assert len(two) == 2 * 4 and set(two["corpus_requests"]) == {-1, 0, 2}  # greedy, auto, corpus, greedy's A/A
    assert (rows[rows["method"] != "greedy (A/A)"]["wall_s_repeats"].map(len) == 3).all()


def test_lade_fills_the_corpus_with_its_own_calls_then_freezes_it(tmp_path):
    """"preceding": lade auto with corpus= decodes the earlier questions in order (the corpus learns each call, the
    same requests plain greedy would give in fp32), then the corpus is frozen."""
    torch.set_num_threads(1)
    model, tok = load_model(str(save_tiny_chat_model(tmp_path / "tiny")))
    corpus, requests = cb.lade_filled(model, tok, "spec_bench:qa", 3, 5, "auto")
    assert corpus.requests == 3 and not corpus.learning and len(requests) == 3
    assert requests == cb.task_requests(model, tok, "spec_bench:qa", 0, 3, 5, "auto")
    corpus.add([1, 2, 3])
    assert corpus.requests == 3


def test_the_following_protocol_clips_the_corpus_to_the_other_questions(tmp_path):
    """"following": the first questions are measured and the corpus holds the next ones, decoded by plain batched
    greedy (200 clipped to the 72 - 1 other questions outside the tuning split, lab.harness.splits); an unknown
    protocol is refused before any work."""
    torch.set_num_threads(1)
    model, tok = load_model(str(save_tiny_chat_model(tmp_path / "tiny")))
    rows = cb.spec_bench_rows(model, tok, "qa", [0, 200], 1, 3, "auto", protocol="following")
    assert list(dict.fromkeys(rows["prompt_id"])) == list(load_prompts("spec_bench:qa", 1)["id"])
    assert set(rows["corpus_requests"]) == {-1, 0, 71}
    with pytest.raises(ValueError, match="protocol must be one of"):
        cb.run_corpus_benchmark(model, tok, ["qa"], [0, 2], 1, 1, 3, protocol="later")


def test_a_frozen_corpus_drafts_but_never_learns():
    """Measured calls share one frozen corpus: what it holds is fixed when it is built."""
    corpus = cb.FrozenCorpus.of([([1, 2, 3, 4], 2), ([5, 6, 7], 1)])
    corpus.add([1, 2, 3, 9, 9])
    assert (len(corpus), corpus.requests) == (7, 2)
    assert corpus.continuations([2, 3], 2, 2) == [((4,), 2, (1.0,))]  # a 2-token match, seen once


def test_findings_and_figure_from_the_results(saved):
    """Findings give every claim its n (pooled tasks, per task, two turns; each with greedy's A/A row); the figure
    draws both panels."""
    text = findings.corpus(saved)
    claims = [line for line in text.splitlines() if line.startswith("- ")]
    assert text.startswith("## Findings") and len(claims) == 4 + 4 + 3 and all("n=" in c for c in claims)
    fig = corpus_plot(cb.corpus_summary(load_results(saved)), "heading")
    assert len(fig.axes) == 2


def test_served_requests_are_each_prompt_and_its_greedy_output(tmp_path):
    """The corpus's earlier requests are decoded in left-padded plain batches; each must be exactly what serving
    the prompt alone gives (prompt tokens, then greedy's output, no padding), so batching only makes filling it
    faster."""
    torch.set_num_threads(1)
    model, tok = load_model(str(save_tiny_chat_model(tmp_path)))
    name = "spec_bench:qa"
    prompts = [cb.encode_prompt(tok, p, name, "auto") for p in load_prompts(name, 5)["prompt"]]
    pad = cb._pad(tok)
    requests = cb.served(model, prompts, 8, pad, batch=3)
    for prompt, (request, prompt_length) in zip(prompts, requests):
        assert prompt_length == prompt.attention_mask.sum()
        alone = model.generate(prompt.input_ids, attention_mask=prompt.attention_mask, do_sample=False,
                               max_new_tokens=8, pad_token_id=pad)[0].tolist()
        while alone[-1] == pad and len(alone) > prompt.input_ids.shape[1]:
            alone.pop()
        assert request == alone
