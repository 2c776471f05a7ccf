"""Notebook 10: lade auto with a corpus of earlier requests against greedy, on Spec-Bench tasks and two-turn
MT-Bench."""

from __future__ import annotations

from pathlib import Path

from lab.harness.bench import REPEATS, ROW_COLUMNS
from lab.harness.intro import run_intro
from lab.harness.results import load_results
from lab.harness.runs import SpecModel
from lab.harness.splits import TUNING_SIZE
from lab.harness.workload import Params, Study, Work
from lab.studies.corpus_bench import CORPUS_COLUMNS, FILL_BATCH, corpus_summary, run_corpus_benchmark
from lab.studies.figures_run import corpus_plot
from lab.studies.findings import corpus as findings

# what notebook 10 calls
__all__ = ["STUDY", "corpus_plot", "corpus_summary", "findings", "intro", "run_corpus_benchmark"]

PROTOCOL_TEXT = {  # lab.studies.corpus_bench.PROTOCOLS, as the intro says them
    "preceding": "\"preceding\" (lade filled each task's corpus decoding the questions before the measured ones)",
    "following": "\"following\" (the first questions measured, the corpus of the next ones by plain batched greedy)",
}
SPEC_BENCH_QUESTIONS = 80 - TUNING_SIZE  # questions of each Spec-Bench task a notebook may use (lab.harness.splits)


def estimate(p: Params, entry: SpecModel) -> list[Work]:
    """Per task (corpus_bench's default protocol, "preceding"): the questions before the measured ones decoded once
    by lade auto filling the corpus, one at a time, then greedy, lade auto and lade auto with each corpus size on the
    measured questions, REPEATS times each; two-turn MT-Bench: turn 1 decoded (plain batched greedy, as the corpus's),
    then turn 2 by greedy and both autos, REPEATS times each."""
    tokens, n, largest = p["max_new_tokens"], p["n_prompts"], max(p["corpus_sizes"])
    work = []
    for task in p["tasks"]:
        ds = f"spec_bench:{task}"
        filled = min(largest, SPEC_BENCH_QUESTIONS - n)
        work.append(Work(ds, "lade-auto corpus= (filling the corpus)", None, filled, tokens))
        names = ["greedy"] + [f"lade-auto+corpus({size})" if size else "lade-auto" for size in p["corpus_sizes"]]
        work += [Work(ds, name, None, n, tokens, repeats=REPEATS) for name in names]
    two = p["two_turn_prompts"]
    turn1 = Work("mt_bench_two_turns", "plain batched greedy (turn 1)", None, -(-two // FILL_BATCH), tokens,
                 rows=FILL_BATCH)
    return work + [turn1] + [Work("mt_bench_two_turns", method, None, two, tokens, repeats=REPEATS)
                             for method in ("greedy", "lade-auto", "lade-auto+corpus")]


STUDY = Study(
    "10_corpus",
    {"corpus.jsonl": (*ROW_COLUMNS, *CORPUS_COLUMNS)},
    ("10_corpus",),
    estimate,
    ("n_prompts", "max_new_tokens", "tasks", "corpus_sizes", "two_turn_prompts"),
)


def intro(path: Path) -> str:
    """Notebook 10: the methods, tasks, counts and corpus sizes (earlier requests per task) its results file holds."""
    params = load_results(path).attrs["provenance"]["params"]
    protocol = PROTOCOL_TEXT.get(params.get("protocol", "following"), params.get("protocol"))
    return run_intro(path, [("corpus sizes", sorted(params["sizes"])), ("corpus protocol", [protocol]),
                            ("timings per prompt", [params.get("repeats", 1)])])
