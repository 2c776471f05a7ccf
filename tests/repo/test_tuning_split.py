"""Tuning and evaluation apart: what steers lade's "auto" (the compression prior lade/cost_prior.py, the acceptance
prior lade/drafters/acceptance_prior.py, and the results files they are generated from) was measured on the tuning
split (lab.harness.splits), and no notebook evaluates a tuning prompt under any experiment spec
(data/experiments/*.yaml), corpus prompts and two-turn conversations included."""

from functools import cache
from pathlib import Path

import pytest

import lade.cost_prior
import lade.drafters.acceptance_prior
from lab.harness.batched import spread_prompts
from lab.harness.prompts import SPEC_BENCH_TASKS, load_prompts, split_set_name
from lab.harness.results import load_results
from lab.harness.splits import TUNING, TUNING_SIZE
from lab.pipeline.plan import notebook_work, resolve
from lab.pipeline.specs import SPEC_DIR, load_spec, model_entries, notebook_parameters
from lab.studies.corpus import SPEC_BENCH_QUESTIONS
from lab.studies.corpus_bench import two_turn_rows

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "data" / "results"
TUNING_RESULTS = ("cost_prior_mt_bench.jsonl", "cost_prior_humaneval.jsonl", "acceptance_prior.jsonl")
TUNED_MODULES = (lade.cost_prior, lade.drafters.acceptance_prior)
NOT_PROMPTS = {"random context", "distribution check"}  # notebook 04's latency forwards, notebook 05's fixed prompt
FIXED_PROMPT_PREFIX = "sampling check "  # notebook 05's losslessness check: its own fixed prompts (sampling_check)


@cache
def texts(name: str) -> dict[str, str]:
    """id -> prompt of every prompt of set `name` (tuning ones included)."""
    data = load_prompts(name, split="all")
    return dict(zip(map(str, data["id"]), data["prompt"]))


@cache
def first_ids(name: str, count: int | None = None) -> tuple[str, ...]:
    """Ids of the first `count` evaluation prompts of `name` (all of them: None), as notebooks load them."""
    return tuple(map(str, load_prompts(name, count)["id"]))


def pairs_of(name: str, ids) -> set[tuple[str, str]]:
    """(base set, id) pairs: 'spec_bench:qa' rows are 'spec_bench' ones."""
    return {(split_set_name(name)[0], str(i)) for i in ids}


def notebook_counts(nb: str, p: dict) -> dict[str, int]:
    """{prompt set: how many of its first prompts notebook `nb` evaluates with parameters `p`} (its parameters
    cell's rules: headline prompts, GSM8K's own count, beam search's extra prompts per task, parallel ranks')."""
    n, wide, more = p.get("n_prompts", 0), p.get("headline_prompts") or 0, p.get("more_prompts") or {}

    def widest(name: str, count: int) -> int:
        return max(count, wide.get(name, 0) if isinstance(wide, dict) else wide)

    counts = {
        "01_mt_bench_speedup": lambda: {"mt_bench": widest("mt_bench", n)},
        "02_humaneval_speedup": lambda: {d: widest(d, p["gsm8k_prompts"] if d == "gsm8k" else n)
                                         for d in p["datasets"]},
        "03_scaling_law": lambda: dict.fromkeys(("mt_bench", "humaneval"), max(n, p.get("parallel_prompts", 0))),
        "04_flops_vs_throughput": lambda: dict.fromkeys(("mt_bench", "humaneval"), n),
        "05_sampling": lambda: {p["prompt_set"]: n},
        "06_ablation": lambda: {"mt_bench": n},
        "07_spec_bench": lambda: {f"spec_bench:{c}": n for c in p["categories"]},
        "08_beam_search": lambda: {f"spec_bench:{c}": max(n, more.get(c, 0)) for c in p["categories"]},
        "09_batches": lambda: dict.fromkeys(p["prompt_sets"], n),
        # corpus_bench's "preceding" protocol: the first max(corpus_sizes) questions fill the corpus, the next n are
        # measured
        "10_corpus": lambda: {f"spec_bench:{t}": min(n + max(p["corpus_sizes"]), SPEC_BENCH_QUESTIONS)
                              for t in p["tasks"]}
        | {"mt_bench_two_turns": p["two_turn_prompts"]},
    }
    if nb not in counts:
        raise AssertionError(f"notebook {nb}: say in notebook_counts which prompts it evaluates")
    return counts[nb]()


def evaluated_ids(nb: str, p: dict) -> set[tuple[str, str]]:
    """Every (set, id) notebook `nb` evaluates or fills a corpus with, under parameters `p`."""
    out = set()
    for name, count in notebook_counts(nb, p).items():
        if name == "mt_bench_two_turns":  # MT-Bench questions, both turns
            out |= pairs_of("mt_bench", (row["id"] for row in two_turn_rows(count)))
        elif nb == "09_batches":
            out |= pairs_of(name, (row["id"] for row in spread_prompts(name, count)))
        else:
            out |= pairs_of(name, first_ids(name, count))
    return out


@cache
def every_evaluation() -> dict[tuple[str, str], set[tuple[str, str]]]:
    """(spec, notebook) -> the (set, id) pairs it evaluates, for every spec in data/experiments/."""
    out = {}
    for path in sorted(SPEC_DIR.glob("*.yaml")):
        resolved = resolve(load_spec(path))
        for nb, given in resolved.params.items():
            p = notebook_parameters(nb) | given
            entries = model_entries(p["model"], p["models"], p.get("configs", []), p.get("prompt_format", "auto"), nb)
            estimated = {w.dataset for e in entries for w in notebook_work(nb, p, e)
                         if not w.dataset.startswith(FIXED_PROMPT_PREFIX)} - NOT_PROMPTS
            counted = set(notebook_counts(nb, p))
            named = {part for d in estimated for part in d.split("+")}  # 03's ranks run "mt_bench+humaneval"
            assert named <= counted, f"{path.name} {nb}: --plan runs {sorted(named - counted)}, not counted here"
            out[(path.name, nb)] = evaluated_ids(nb, p)
    return out


def tuning_files() -> dict[str, set[tuple[str, str]]]:
    """Each tuning file -> the (set, id) pairs it says it was measured on."""
    files = {m.__name__: {(s, str(i)) for s, i in m.TUNED_ON} for m in TUNED_MODULES}
    for name in TUNING_RESULTS:
        rows = load_results(RESULTS / name)
        files[name] = {(s, str(i)) for s, i in zip(rows["prompt_set"], rows["prompt_id"])}
    return files


@pytest.mark.parametrize("name", sorted(TUNING))
def test_tuning_split_is_the_end_of_each_set(name):
    """The tuning prompts are each set's last TUNING_SIZE (Spec-Bench: of each task), which first-n evaluation never
    reaches; the evaluation split is every other prompt."""
    groups = [f"spec_bench:{t}" for t in SPEC_BENCH_TASKS] if name == "spec_bench" else [name]
    ends = [str(i) for g in groups for i in load_prompts(g, split="all")["id"][-TUNING_SIZE:]]
    assert sorted(TUNING[name]) == sorted(ends)
    assert list(load_prompts(name, split="tuning")["id"]) == [i for i in texts(name) if i in set(TUNING[name])]
    assert not set(load_prompts(name)["id"]) & set(TUNING[name])


def test_evaluation_counts_reaching_the_tuning_split_are_refused():
    """A count past a set's evaluation prompts is an error that says what to ask for, not a silent cut."""
    with pytest.raises(ValueError, match=r"tuning split.*at most 72"):
        load_prompts("mt_bench", 80)
    with pytest.raises(ValueError, match=r"at most 156"):
        load_prompts("humaneval", 157)
    assert len(load_prompts("spec_bench:coding", 80)) == 10  # a category without tuning prompts is cut as before


def test_tuning_files_name_only_tuning_prompts_measured_at_a_clean_commit():
    """Every prior file and its results file say which (set, id) they used: tuning prompts only, the lade file and
    its rows agreeing; the rows were measured at a recorded commit with a clean tree."""
    files = tuning_files()
    tuning = {(name, i) for name, ids in TUNING.items() for i in ids}
    for name, pairs in files.items():
        assert pairs and pairs <= tuning, (name, sorted(pairs - tuning))
    assert files["lade.cost_prior"] == files[TUNING_RESULTS[0]] | files[TUNING_RESULTS[1]]
    assert files["lade.drafters.acceptance_prior"] == files[TUNING_RESULTS[2]]
    for name in TUNING_RESULTS:
        prov = load_results(RESULTS / name).attrs["provenance"]
        assert prov["git_commit"] and prov["git_dirty"] is False, name
        assert prov["params"]["split"] == "tuning", name


def test_no_evaluated_prompt_is_in_a_tuning_file():
    """No (set, id) any notebook evaluates under any spec, nor its text (Spec-Bench's MT-Bench task holds the MT-Bench
    questions), is in a tuning file."""
    tuned = set().union(*tuning_files().values())
    tuned_text = {texts(s)[i] for s, i in tuned}
    for (spec, nb), pairs in every_evaluation().items():
        assert pairs, (spec, nb)
        assert not pairs & tuned, (spec, nb, sorted(pairs & tuned))
        assert not {texts(s)[i] for s, i in pairs} & tuned_text, (spec, nb)
