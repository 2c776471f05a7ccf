"""The tuning split: the prompts that what steers lade's "auto" and cost model is measured on, apart from every prompt
a notebook evaluates.

Each frozen set keeps its last TUNING_SIZE prompts for tuning (Spec-Bench: the last TUNING_SIZE questions of each of
its six tasks; its MT-Bench task holds the same questions, with the same ids, as MT-Bench). The notebooks take a set's
first n prompts and notebook 10's corpora the questions after them, so the end of a set is what they can leave alone:
lab.harness.prompts.load_prompts serves the other prompts ("evaluation", its default) and refuses a count that
would reach into the tuning ones. scripts/cost_prior.py and scripts/acceptance_prior.py measure on split="tuning" and
record the (set, id) pairs they used (TUNED_ON in the lade files they write, prompt ids in their results files).
"""

from __future__ import annotations

from datasets import Dataset

TUNING_SIZE = 8  # prompts per set (per Spec-Bench task) kept for tuning
SPLITS = ("evaluation", "tuning", "all")
_SPEC_BENCH_TASK_ENDS = (160, 240, 320, 400, 480, 560)  # last question id of each task (mt_bench, translation, ...)

TUNING: dict[str, tuple[str, ...]] = {  # prompt set -> ids of its tuning prompts (its last ones, in file order)
    "mt_bench": tuple(str(i) for i in range(153, 161)),  # questions 153-160 (humanities)
    "humaneval": tuple(f"HumanEval/{i}" for i in range(156, 164)),
    "gsm8k": tuple(str(i) for i in range(1311, 1319)),
    "spec_bench": tuple(str(i) for end in _SPEC_BENCH_TASK_ENDS for i in range(end - TUNING_SIZE + 1, end + 1)),
}


def select_split(data: Dataset, name: str, n: int | None, split: str) -> Dataset:
    """The rows of `data` (prompt set `name`, its `id` column as strings) in `split`, the first `n` of them if given.

    An evaluation count that would reach the tuning prompts is refused: a spec or notebook asking for it must ask
    for fewer (at most the evaluation prompts the set has)."""
    if split not in SPLITS:
        raise ValueError(f"split {split!r} is not one of {SPLITS}")
    tuning = set(TUNING.get(name.partition(":")[0], ()))
    ids = [str(i) for i in data["id"]]
    keep = list(range(len(ids))) if split == "all" else [i for i, id_ in enumerate(ids)
                                                         if (id_ in tuning) == (split == "tuning")]
    if split == "tuning" and not keep:
        raise ValueError(f"prompt set {name!r} has no tuning prompts (sets with a tuning split: {sorted(TUNING)})")
    held = len(ids) - len(keep)
    if split == "evaluation" and n is not None and n > len(keep) and held:
        raise ValueError(f"load_prompts({name!r}, n={n}): {name} has {len(keep)} evaluation prompts; its other {held} "
                         "are the tuning split that lade's priors are measured on (lab/harness/splits.py), which no "
                         f"evaluation may use. Ask for at most {len(keep)} (e.g. n_prompts: {len(keep)} in the spec).")
    return data.select(keep[:n] if n is not None else keep)
