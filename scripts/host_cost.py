"""Host seconds per row and step: what lade's loop does outside the model forward, against transformers' plain loop
(the quantities lade.cost.HOST_S and LOOP_S price). Forwards are timed by hooks on the model, so every method's host
time is its wall time minus its forwards' time, divided by its row-steps.

    python scripts/host_cost.py [--model embedded] [--rows 1,4,16] [--tokens 48] [--threads 2]

Prints, per batch size: plain generate's host ms per row-step, lade's with drafting disabled (its loop alone), lade's
adaptive config (what "auto" runs where it drafts, here never handed to transformers' loop) per row-step, and the
differences: LOOP_S = lade disabled - plain; HOST_S = (auto - disabled) per drafting row-step.
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
    for rows in map(int, args.rows.split(",")):
        prompts = [encode_prompt(tokenizer, p["prompt"], "humaneval").input_ids[0]
                   for p in load_prompts("humaneval", rows)]
        ids, mask = left_pad(prompts, tokenizer.pad_token_id)
        results = {}
        for method in ("plain", "disabled", "auto", "plain", "disabled", "auto"):  # second round kept (warm)
            results[method] = host_ms(model, ids, mask, method, args.tokens)
        (plain, _), (disabled, _), (auto, auto_steps) = results["plain"], results["disabled"], results["auto"]
        print(f"rows {rows}: host ms per row-step: plain {plain:.2f}, lade disabled {disabled:.2f}, auto {auto:.2f} "
              f"({auto_steps} row-steps); loop {disabled - plain:+.2f}, drafting {auto - disabled:+.2f}")


if __name__ == "__main__":
    main()
