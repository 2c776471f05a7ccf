"""Does "auto" lose its first call at a new batch size? From a fresh lade cache and one warm-up call at one batch size,
the first "auto" call at each batch size against plain batched greedy, then a second (warm) one.

    python scripts/bench_auto_cold_start.py [--sizes 1,4,8,16] [--tokens 128] [--warmup-rows 1] [--threads 2]
        [--out data/results/experiments/auto_cold_start/cold_start.jsonl]

The model is the embedded one (float32, linear layers packed, as the lab benchmarks every method on the CPU); the
prompts are MT-Bench first turns that no notebook evaluates (`hidden_prompts`: past the first 16 questions, none of
the two-turn set or the tuning split). Per batch size R (the first R prompts, left-padded), in this order: "auto"
(its first call at R), plain greedy, "auto" again, plain greedy again; EOS is ignored so every call decodes
`--tokens` per row. One row per call: wall seconds, whether its rows equal plain greedy's, whether "auto" handed
the batch to transformers' loop. The provenance (lab.harness.provenance) is written beside the rows; the printed
ratios are plain seconds (mean of its two calls) over each "auto" call's.
"""

from __future__ import annotations

import argparse
import json
import os
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
    parser.add_argument("--warmup-rows", type=int, default=1, help="batch size of the one warm-up call")
    parser.add_argument("--warmup-tokens", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--profiles", type=Path, default=None,
                        help="lade cache the profiles go to (default: a fresh temporary folder; reuse one only to "
                             "check the script)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
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
        plain_out = None
        for call, method in enumerate(("auto", "greedy", "auto", "greedy")):
            seconds, out, handed = timed(model, ids, mask, method, args.tokens)
            plain_out = out if method == "greedy" and plain_out is None else plain_out
            rows.append({"batch": size, "method": method, "call": call // 2 + 1, "wall_s": seconds,
                         "handed_over": handed, "out": out[:, ids.shape[1]:].tolist()})
        plain = [r for r in rows if r["batch"] == size and r["method"] == "greedy"]
        for r in rows[-4:]:
            r["same_as_plain"] = r["out"] == plain[0]["out"]
        mean_plain = sum(r["wall_s"] for r in plain) / len(plain)
        first, warm = (r for r in rows[-4:] if r["method"] == "auto")
        print(f"batch {size}: plain {mean_plain:.2f} s; auto first {first['wall_s']:.2f} s "
              f"({mean_plain / first['wall_s']:.3f}x), warm {warm['wall_s']:.2f} s ({mean_plain / warm['wall_s']:.3f}x)"
              f"; handed over {first['handed_over']}; same rows {all(r['same_as_plain'] for r in rows[-4:])}",
              flush=True)
    table = pd.DataFrame([{k: v for k, v in r.items() if k != "out"} for r in rows])
    table.attrs = provenance(script="scripts/bench_auto_cold_start.py", sizes=sizes, tokens=args.tokens,
                             warmup_rows=args.warmup_rows, warmup_tokens=args.warmup_tokens, warmup_s=warmup_s,
                             threads=args.threads, question_ids=[q for q, _ in prompts], model="embedded",
                             fresh_cache=args.profiles is None)
    print(save_results(table, args.out))


if __name__ == "__main__":
    main()
