"""Does "auto" lose its first call at a new batch size? From a fresh lade cache and one warm-up call at one batch size,
"auto" at each batch size against plain batched greedy, its first call there reported apart from its warm ones.

    python scripts/bench_auto_cold_start.py [--sizes 1,4,8,16] [--tokens 128] [--repeats 3] [--warmup-rows 4]
        [--threads 2] [--out data/results/experiments/auto_cold_start/cold_start.jsonl]

The warm-up is one "auto" call of `--warmup-tokens` at `--warmup-rows` rows from a fresh lade cache: it measures the
profiles that call prices with (lade.profile measures a row count's profile when a price first needs it: one sequence
the one-row profile alone, a batch of R the counts up to the first at or above R).

The model is the embedded one (float32, linear layers packed, as the lab benchmarks every method on the CPU); the
prompts are MT-Bench first turns that no notebook evaluates (`hidden_prompts`: past the first 16 questions, none of
the two-turn set or the tuning split). Per batch size R (the first R prompts, left-padded): one untimed plain call of
`--tokens` (the first use of R's shapes, e.g. the packed linears' kernels, and of every cache length and the memory a
call at R reaches is charged to neither method), then `--repeats`
rounds of one "auto" and one plain greedy call, the order alternating (auto first in the first round, so the first
timed call at R is "auto"'s first: it pays whatever "auto" does at a batch size it has not seen, and nothing else).
EOS is ignored so every call decodes `--tokens` per row. One row per call (wall seconds, whether its rows equal plain
greedy's, whether "auto" handed the batch to transformers' loop, how many profiles it measured, the process's minor
page faults during it: a count, to tell allocator state from work when a call's time stands out) in `--out`, and per
batch size the median plain seconds over the first "auto" call's and over the median of the later ones (`summary`
beside it); each file's provenance (lab.harness.provenance, the command included) is written beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from pathlib import Path

import pandas as pd
import torch

import lade
from lab.harness.models import load_model
from lab.harness.paths import REPO
from lab.harness.provenance import provenance
from lab.harness.results import save_results
from lab.harness.splits import TUNING
from lade.profile import cached_rows

OUT = REPO / "data" / "results" / "experiments" / "auto_cold_start" / "cold_start.jsonl"
NOTEBOOK_QUESTIONS = 16  # the notebooks run at most the first 12 MT-Bench questions: these are left out
TUNING_IDS = {int(i) for i in TUNING["mt_bench"]}  # the questions lade's priors are measured on


def hidden_prompts(count: int) -> list[tuple[int, str]]:
    """(question id, first turn) of `count` MT-Bench questions no notebook runs and no prior was measured on: past
    the first NOTEBOOK_QUESTIONS, none of the two-turn set or the tuning split, the last ones first."""
    data = REPO / "data" / "prompts"
    rows = [json.loads(line) for line in (data / "mt_bench.jsonl").open()]
    two_turns = {json.loads(line)["id"] for line in (data / "mt_bench_two_turns.jsonl").open()}
    left_out = two_turns | TUNING_IDS
    kept = [(r["question_id"], r["turns"][0]) for r in rows[NOTEBOOK_QUESTIONS:] if r["question_id"] not in left_out]
    if len(kept) < count:
        raise ValueError(f"only {len(kept)} hidden MT-Bench questions, {count} asked for")
    return kept[::-1][:count]


def encode(tokenizer, prompts: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Chat-templated prompts, left-padded: ids and attention mask [B, P]."""
    rows = [tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                          return_tensors="pt", return_dict=True)["input_ids"][0] for p in prompts]
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    return lade.left_pad(rows, pad)


def timed(model, ids: torch.Tensor, mask: torch.Tensor, method: str, tokens: int) -> tuple[float, torch.Tensor, bool]:
    """(wall seconds, sequences [B, P + T], handed over) of one call."""
    kw = dict(attention_mask=mask, max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False)
    start = time.perf_counter()
    if method == "greedy":
        out, handed = model.generate(ids, **kw), False
    else:
        result = lade.generate(model, ids, "auto", return_dict_in_generate=True, **kw)
        out, handed = result.sequences, bool(result.lookahead_stats.handed_over)
    return time.perf_counter() - start, out, handed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1,4,8,16", help="batch sizes, in the order they are first called")
    parser.add_argument("--tokens", type=int, default=128, help="new tokens per row")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls of each method per batch size")
    parser.add_argument("--warmup-rows", type=int, default=4, help="batch size of the one warm-up call")
    parser.add_argument("--warmup-tokens", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--profiles", type=Path, default=None,
                        help="lade cache the profiles go to (default: a fresh temporary folder; reuse one only to "
                             "check the script)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if args.repeats < 2:
        parser.error("--repeats must be at least 2: the first auto call at a size is reported apart from the later")
    torch.set_num_threads(args.threads)
    model, tokenizer = load_model("embedded")  # from the usual lade cache; the profiles go to a fresh one below
    prompts = hidden_prompts(max(sizes + [args.warmup_rows]))
    fresh = str(args.profiles) if args.profiles is not None else tempfile.mkdtemp(prefix="lade-cold-")
    os.environ["LADE_CACHE"] = fresh  # nothing profiled yet: the warm-up call measures the model's profile
    ids, mask = encode(tokenizer, [p for _, p in prompts[: args.warmup_rows]])
    warmup_s, _, _ = timed(model, ids, mask, "auto", args.warmup_tokens)
    print(f"warm-up: auto at batch {args.warmup_rows}, {warmup_s:.1f} s (profiles into {fresh})", flush=True)
    rows = []
    for size in sizes:
        ids, mask = encode(tokenizer, [p for _, p in prompts[:size]])
        timed(model, ids, mask, "greedy", args.tokens)  # untimed: R's shapes and cache lengths warmed for both
        for round_ in range(args.repeats):
            for method in ("auto", "greedy") if round_ % 2 == 0 else ("greedy", "auto"):
                before, faults = profiles(fresh), resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                seconds, out, handed = timed(model, ids, mask, method, args.tokens)
                faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
                rows.append({"batch": size, "method": method, "call": round_ + 1, "wall_s": seconds,
                             "handed_over": handed, "profiles_measured": len(profiles(fresh) - before),
                             "minor_faults": faults,
                             "out": out[:, ids.shape[1]:].tolist()})
        here = [r for r in rows if r["batch"] == size]
        plain = next(r["out"] for r in here if r["method"] == "greedy")
        for r in here:
            r["same_as_plain"] = r["out"] == plain
    table = pd.DataFrame([{k: v for k, v in r.items() if k != "out"} for r in rows])
    summary = summarize(table)
    print(summary.to_string(index=False), flush=True)
    params = dict(sizes=sizes, tokens=args.tokens, repeats=args.repeats, warmup_rows=args.warmup_rows,
                  warmup_tokens=args.warmup_tokens, warmup_s=warmup_s, threads=args.threads,
                  question_ids=[q for q, _ in prompts], model="embedded", fresh_cache=args.profiles is None,
                  profiled_rows=cached_rows(model),
                  shape_warmup="one untimed plain call of `tokens` per batch size before its timed calls",
                  order="rounds of (auto, greedy), (greedy, auto), ... alternating, auto first")
    table.attrs = provenance(script="scripts/bench_auto_cold_start.py", **params)
    summary.attrs = provenance(script="scripts/bench_auto_cold_start.py", source=args.out.name, **params)
    print(save_results(table, args.out))
    print(save_results(summary, args.out.with_name(args.out.stem + "_summary.csv")))


def profiles(cache: str) -> set[str]:
    """The latency profiles a lade cache holds (file names)."""
    return {path.name for path in (Path(cache) / "cost").glob("latency-*.json")}


def summarize(table: pd.DataFrame) -> pd.DataFrame:
    """Per batch size: plain's median seconds, "auto"'s first call and the median of its later ones, and plain over
    each (>= 1: "auto" is as fast or faster); whether every row equalled plain's and every "auto" call handed over."""
    out = []
    for size, calls in table.groupby("batch", sort=False):
        plain = calls[calls.method == "greedy"].wall_s.median()
        auto = calls[calls.method == "auto"].sort_values("call")
        first, warm = auto.wall_s.iloc[0], auto.wall_s.iloc[1:].median()
        out.append({"batch": size, "plain_median_s": plain, "auto_first_s": first, "auto_warm_median_s": warm,
                    "ratio_first": plain / first, "ratio_warm": plain / warm,
                    "handed_over": bool(auto.handed_over.all()),
                    "profiles_measured": int(auto.profiles_measured.sum()),
                    "same_rows": bool(calls.same_as_plain.all())})
    return pd.DataFrame(out)

if __name__ == "__main__":
    main()
