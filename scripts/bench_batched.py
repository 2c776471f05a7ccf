"""Throughput of batched lookahead vs batched plain greedy, by batch size (SmolLM2-135M, MT-Bench prompts).

    PYTHONPATH=. python scripts/bench_batched.py [--batch-sizes 1 2 4 8 16] [--prompts 16] [--new-tokens 64]

The same prompts are decoded at every batch size (split into consecutive batches, left-padded); plain
greedy and lade run side by side on each batch, and lade's output is checked token for token against
plain's. EOS is off so every row produces exactly --new-tokens tokens. Prints new tokens/s over the batch,
the lade/plain ratio, per-row compression (tokens per forward per row) and the wall time per step.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

import lade
from lade import left_pad
from lab.prompts import encode_chat, load_prompts
from lab.models import load_model
from lab.timing import timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--prompts", type=int, default=16, help="MT-Bench prompts decoded at every batch size")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--window", type=int, default=4)
    parser.add_argument("--ngram", type=int, default=3)
    parser.add_argument("--guess", type=int, default=4)
    parser.add_argument("--out", type=Path, default=None, help="write the results as JSON here")
    args = parser.parse_args()

    model, tok = load_model("embedded")
    config = lade.LookaheadConfig(window_size=args.window, ngram_size=args.ngram, guess_set_size=args.guess)
    prompts = [encode_chat(tok, row["prompt"])[0][0] for row in load_prompts("mt_bench", n=args.prompts)]
    kw = dict(do_sample=False, max_new_tokens=args.new_tokens, eos_token_id=None, pad_token_id=tok.pad_token_id)
    warm_ids, warm_mask = left_pad(prompts[:2], tok.pad_token_id)
    lade.generate(model, warm_ids, config, attention_mask=warm_mask, **{**kw, "max_new_tokens": 4})

    print(f"SmolLM2-135M fp32, {torch.get_num_threads()} threads, {args.prompts} MT-Bench prompts x "
          f"{args.new_tokens} new tokens, lade {config} (<= {config.max_step_tokens()} tokens per row and step)")
    print(f"{'B':>3} {'plain tok/s':>11} {'lade tok/s':>10} {'lade/plain':>10} {'compr/row':>9} "
          f"{'plain ms/step':>13} {'lade ms/step':>12} {'exact':>5}")
    results = []
    for bs in args.batch_sizes:
        plain_s = lade_s = 0.0
        steps = row_steps = tokens = 0
        exact = True
        for start in range(0, len(prompts), bs):
            ids, mask = left_pad(prompts[start : start + bs], tok.pad_token_id)
            with torch.inference_mode():
                ref, t_plain = timed(model.generate, ids, attention_mask=mask, **kw)
                out, t_lade = timed(lade.generate, model, ids, config, attention_mask=mask,
                                    return_dict_in_generate=True, **kw)
            exact &= torch.equal(out.sequences, ref)
            plain_s += t_plain
            lade_s += t_lade
            steps += out.lookahead_stats.steps
            row_stats = out.row_stats or [out.lookahead_stats]  # B=1 unpadded runs the single-sequence loop
            row_steps += sum(s.steps for s in row_stats)
            tokens += out.lookahead_stats.new_tokens
        row = dict(batch_size=bs, plain_tok_s=tokens / plain_s, lade_tok_s=tokens / lade_s,
                   speedup=plain_s / lade_s, compression_per_row=tokens / row_steps,
                   plain_step_ms=1000 * plain_s / (args.new_tokens * -(-len(prompts) // bs)),
                   lade_step_ms=1000 * lade_s / steps, exact=exact)
        results.append(row)
        print(f"{bs:>3} {row['plain_tok_s']:>11.1f} {row['lade_tok_s']:>10.1f} {row['speedup']:>10.2f} "
              f"{row['compression_per_row']:>9.2f} {row['plain_step_ms']:>13.1f} {row['lade_step_ms']:>12.1f} "
              f"{str(exact):>5}", flush=True)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(dict(config=config.to_dict(), new_tokens=args.new_tokens,
                                            prompts=args.prompts, results=results), indent=2))


if __name__ == "__main__":
    main()
