"""What a corpus of earlier requests offers: oracle copiers on notebook 10's Spec-Bench workload.

An oracle copier knows the output. At each step it accepts the longest continuation (at most `depth` tokens) of the
output's last `anchor` tokens that occurs in its text and that the output follows, then one token more (the
step's own). Its compression bounds that of every drafter that copies continuations of matches of at least `anchor`
tokens from that text, however wide its tree (retrieval over the request's own tokens; a corpus). It does not bound
drafters that draw on the model (recycling, the Jacobi window).

For each measured question (a task's first `n_prompts`, decoded by greedy), two texts:
- own: the request's own earlier tokens (its prompt and its output so far), which retrieval copies from;
- own+corpus: those and the prompts and outputs of the task's next `size` questions, as notebook 10's corpus holds.
`gain` = steps(own) / steps(own+corpus) over the same output: how far a corpus raises the oracle's compression (the
headroom a corpus offers; a real drafter reaches neither oracle).
Compare with lade's compression with and without a corpus on the same questions (notebook 10, corpus-target spec).

    python -m lab.studies.corpus_headroom --n-prompts 10 --size 50 --threads 2 \
        --out data/results/experiments/corpus_headroom/oracle_copiers.jsonl
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence

import pandas as pd
import torch

from lab.harness.models import load_model
from lab.harness.prompts import SPEC_BENCH_TASKS, load_prompts
from lab.harness.provenance import model_record, provenance
from lab.harness.results import report
from lab.harness.stats import interval, ratio_of_sums
from lab.studies.corpus_bench import task_requests

MATCHES = (1, 2, 3, 4)  # anchors tried: tokens a copied continuation follows
DEPTH = 8  # tokens a step copies at most (lade's planned trees are rarely deeper)
HEADROOM_COLUMNS = {
    "task": "Spec-Bench task",
    "prompt_id": "the measured question's id in the frozen set (one of the task's first n_prompts)",
    "anchor": "tokens a copied continuation's match ends with (at least)",
    "depth": "tokens a step copies at most",
    "corpus_requests": "the task's later questions in the corpus",
    "new_tokens": "tokens of the question's greedy output",
    "steps_own": "steps of the oracle copier over the request's own earlier tokens",
    "steps_corpus": "steps of the oracle copier over those and the corpus",
}


def ngrams(tokens: Sequence[int], longest: int) -> set[tuple[int, ...]]:
    """Every n-gram of `tokens` with 1 <= n <= longest."""
    return {tuple(tokens[i:i + n]) for i in range(len(tokens)) for n in range(1, min(longest, len(tokens) - i) + 1)}


def oracle_steps(tokens: Sequence[int], start: int, anchor: int, depth: int,
                 corpus: set[tuple[int, ...]] | None = None) -> int:
    """Steps of the oracle copier over tokens[start:] (module docstring), copying from tokens[:p] at position p and
    from `corpus` (n-grams of at least anchor + depth tokens, from `ngrams`) where given."""
    if anchor < 1 or depth < 0 or not 0 <= start <= len(tokens):
        raise ValueError(f"need anchor >= 1, depth >= 0 and 0 <= start <= {len(tokens)}, got {anchor}, {depth}, "
                         f"{start}")
    longest = anchor + depth
    own = ngrams(tokens[:start], longest)
    p, steps = start, 0
    while p < len(tokens):
        copied = 0
        for text in (own, corpus) if corpus is not None else (own,):
            k = 0
            while p >= anchor and k < depth and p + k < len(tokens) and tuple(tokens[p - anchor:p + k + 1]) in text:
                k += 1
            copied = max(copied, k)
        end = min(p + copied + 1, len(tokens))
        for j in range(p, end):  # the accepted tokens join the request's own text
            own.update(tuple(tokens[i:j + 1]) for i in range(max(0, j + 1 - longest), j + 1))
        p, steps = end, steps + 1
    return steps


def headroom_rows(task: str, requests: Sequence[tuple[Sequence[int], int]], ids: Sequence[str], size: int,
                  anchors: Iterable[int] = MATCHES, depth: int = DEPTH) -> list[dict]:
    """requests: (tokens, prompt length) of the task's questions in order; the first len(ids) (their prompt ids) are
    measured against a corpus of the next `size` (HEADROOM_COLUMNS)."""
    anchors, n_prompts = list(anchors), len(ids)
    others = requests[n_prompts:n_prompts + size]
    corpus: set[tuple[int, ...]] = set()
    for tokens, _ in others:
        corpus |= ngrams(tokens, max(anchors) + depth)
    rows = []
    for prompt_id, (tokens, start) in zip(ids, requests[:n_prompts]):
        for anchor in anchors:
            rows.append({"task": task, "prompt_id": prompt_id, "anchor": anchor, "depth": depth,
                         "corpus_requests": len(others), "new_tokens": len(tokens) - start,
                         "steps_own": oracle_steps(tokens, start, anchor, depth),
                         "steps_corpus": oracle_steps(tokens, start, anchor, depth, corpus)})
    return rows


def summarize_headroom(table: pd.DataFrame) -> pd.DataFrame:
    """Per task (and all tasks pooled) and anchor: questions, the copiers' compressions (tokens over steps, summed over
    questions) and the gain with its 95% bootstrap interval over questions (lab.harness.stats.interval)."""
    out = []
    pooled = table.assign(task="all")
    for (task, anchor), part in pd.concat([table, pooled]).groupby(["task", "anchor"], sort=False):
        tokens, own, corpus = (part[c].to_numpy(float) for c in ("new_tokens", "steps_own", "steps_corpus"))
        low, high = interval(ratio_of_sums, [own, corpus])
        out.append({"task": task, "anchor": anchor, "questions": len(part),
                    "own": tokens.sum() / own.sum(), "own+corpus": tokens.sum() / corpus.sum(),
                    "gain": float(ratio_of_sums(own, corpus)), "gain_low": low, "gain_high": high})
    return pd.DataFrame(out)


def run_headroom(model, tokenizer, tasks: Sequence[str], n_prompts: int, size: int, anchors: Sequence[int],
                 depth: int, max_new_tokens: int, prompt_format: str = "auto") -> pd.DataFrame:
    """Each task's first n_prompts + size questions decoded by greedy (lab.studies.corpus_bench.task_requests), then
    `headroom_rows`; provenance in attrs."""
    rows = []
    for task in tasks:
        name = f"spec_bench:{task}"
        ids = [str(i) for i in load_prompts(name)["id"]]
        if len(ids) <= n_prompts:
            raise ValueError(f"{name} has {len(ids)} questions: set n_prompts below that, leaving some for a corpus")
        requests = task_requests(model, tokenizer, name, 0, n_prompts + size, max_new_tokens, prompt_format)
        rows += headroom_rows(task, requests, ids[:n_prompts], size, anchors, depth)
    table = pd.DataFrame(rows, columns=list(HEADROOM_COLUMNS))
    table.attrs["provenance"] = provenance(
        model=getattr(model.config, "_name_or_path", ""), **model_record(model), tasks=list(tasks),
        n_prompts=n_prompts, size=size, anchors=list(anchors), depth=depth, max_new_tokens=max_new_tokens,
        prompt_format=prompt_format)
    return table


def main(argv: Sequence[str] | None = None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(prog="python -m lab.studies.corpus_headroom", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="embedded", help="'embedded', a local model folder or a Hub id")
    parser.add_argument("--tasks", default=",".join(SPEC_BENCH_TASKS), help="comma-separated Spec-Bench tasks")
    parser.add_argument("--n-prompts", type=int, default=10, help="measured questions per task (the first ones)")
    parser.add_argument("--size", type=int, default=50, help="the task's next questions in the corpus")
    parser.add_argument("--anchors", default=",".join(map(str, MATCHES)), help="comma-separated match lengths")
    parser.add_argument("--depth", type=int, default=DEPTH)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--out", default=None, help="results file (.jsonl or .csv)")
    args = parser.parse_args(argv)
    anchors = [int(a) for a in args.anchors.split(",") if a]
    if args.n_prompts < 1 or args.size < 1 or args.depth < 0 or not anchors or min(anchors) < 1:
        parser.error("need --n-prompts >= 1, --size >= 1, --depth >= 0 and anchors >= 1")
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_model(args.model)
    table = run_headroom(model, tokenizer, [t for t in args.tasks.split(",") if t], args.n_prompts, args.size,
                         anchors, args.depth, args.max_new_tokens)
    report(summarize_headroom(table), table, args.out)
    return table


if __name__ == "__main__":
    main()
