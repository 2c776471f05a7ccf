"""Per-step attention time of each lookahead attention path vs tokens per step and cache length (CPU).

Shapes of SmolLM2-135M (30 layers, 9 query heads, 3 kv heads, head dim 64), fp32; real lookahead tree masks.
Usage: PYTHONPATH=. python scripts/bench_attention.py [--reps 5] [--pasts 128 512 2048] [--json out.json]
Paths are timed interleaved in one run; ratios are to mask_sdpa (the default path on eager/sdpa models).
"""

from __future__ import annotations

import argparse
import json

import torch

from lab.studies.attention_timing import synthetic_layout, time_steps

# (W, N, G) -> tokens per step q = 1 + (W + G)(N - 1)
CONFIGS = [(2, 3, 2), (4, 4, 4), (5, 4, 5), (7, 5, 7), (15, 5, 15)]
PATHS = ["mask_sdpa", "mask_eager", "split", "flex"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--pasts", type=int, nargs="+", default=[128, 512, 2048])
    parser.add_argument("--layers", type=int, default=30)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--json", default=None, help="also write the rows to this file")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    rows = []
    print(f"{'q':>4} {'past':>5} " + " ".join(f"{p + ' ms':>13}" for p in PATHS) + "   split/mask  flex/mask")
    for window, ngram, guesses in CONFIGS:
        layout = synthetic_layout(window, ngram, guesses, device)
        for past in args.pasts:
            times = time_steps(PATHS, layout, past, 9, 3, 64, torch.float32, device, args.layers, args.reps)
            rows.append(dict(q=layout.size, past=past, wng=(window, ngram, guesses), seconds=times))
            print(f"{layout.size:>4} {past:>5} " + " ".join(f"{1e3 * times[p]:>13.2f}" for p in PATHS)
                  + f"   {times['split'] / times['mask_sdpa']:>10.2f} {times['flex'] / times['mask_sdpa']:>10.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device="cpu", threads=torch.get_num_threads(), layers=args.layers, rows=rows), f, indent=1)


if __name__ == "__main__":
    main()
