"""Host seconds per row and step: what lade's loop does outside the model forward, against transformers' plain loop
(the quantities a latency profile's host_s and loop_s estimate, lade.host_cost, measured here end to end).
Forwards are timed by hooks on the model, so every method's host time is its wall time minus its forwards' time,
divided by its row-steps.

    python scripts/host_cost.py [--model embedded] [--rows 1,4,16] [--tokens 48] [--threads 2]

Prints, per batch size: plain generate's host ms per row-step, lade's with drafting disabled (its loop alone), lade's
adaptive config (what "auto" runs where it drafts, here never handed to transformers' loop) per row-step, and the
differences: loop_s = lade disabled - plain; host_s = (auto - disabled) per drafting row-step. The prompts are those of
the tuning split (lab.harness.splits), HumanEval's then MT-Bench's. A timing: run it alone on the machine.
"""

from __future__ import annotations

import argparse
import time

import torch

from lab.harness.models import load_model
from lab.harness.prompts import encode_prompt, load_prompts
from lab.harness.timing import ForwardTimer
from lade.api import generate as lade_generate
from lade.auto import auto_config
from lade.config import LookaheadConfig
from lade.rows import left_pad

TUNING_SETS = ("humaneval", "mt_bench")  # rows are their tuning prompts (lab.harness.splits), HumanEval's first


def host_ms(model, ids, mask, method, tokens: int) -> tuple[float, int]:
    """(host ms per row-step, row-steps) of one call of `method` ("plain", "disabled", "auto")."""
    kw = dict(max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False)
    timer = ForwardTimer(model)
    with timer.measuring(), torch.inference_mode():
        start = time.perf_counter()
        if method == "plain":
            model.generate(ids, attention_mask=mask, **kw)
            row_steps = timer.calls * ids.shape[0]
        else:
            config = LookaheadConfig(enabled=False) if method == "disabled" else auto_config(model)  # never handed over
            out = lade_generate(model, ids, config, attention_mask=mask, return_dict_in_generate=True, **kw)
            stats = out.row_stats or [out.lookahead_stats]
            row_steps = sum(s.steps for s in stats)
        wall = time.perf_counter() - start
    return 1000 * (wall - timer.seconds) / row_steps, row_steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--rows", default="1,4,16")
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=0)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_model(args.model)
    tuning = [(name, row["prompt"]) for name in TUNING_SETS for row in load_prompts(name, split="tuning")]
    for rows in map(int, args.rows.split(",")):
        if rows > len(tuning):
            raise SystemExit(f"--rows {rows}: the tuning split of {TUNING_SETS} has {len(tuning)} prompts "
                             "(lab.harness.splits)")
        prompts = [encode_prompt(tokenizer, prompt, name).input_ids[0] for name, prompt in tuning[:rows]]
        ids, mask = left_pad(prompts, tokenizer.pad_token_id)
        results = {}
        for method in ("plain", "disabled", "auto", "plain", "disabled", "auto"):  # second round kept (warm)
            results[method] = host_ms(model, ids, mask, method, args.tokens)
        (plain, _), (disabled, _), (auto, auto_steps) = results["plain"], results["disabled"], results["auto"]
        print(f"rows {rows}: host ms per row-step: plain {plain:.2f}, lade disabled {disabled:.2f}, auto {auto:.2f} "
              f"({auto_steps} row-steps); loop {disabled - plain:+.2f}, drafting {auto - disabled:+.2f}")


if __name__ == "__main__":
    main()
