"""Step compression vs number of ranks (lookahead parallelism, gloo on CPU) -> data/results/distributed_scaling.jsonl.

Usage: python scripts/bench_distributed.py [--ranks 1 2] [--window-share 3] [--guess-share 3] [--ngram 4]
       [--prompts-per-set 2] [--max-new-tokens 64]
"""

import argparse
import json

from lab.studies.parallel import compression_vs_ranks

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--window-share", type=int, default=3)
    parser.add_argument("--guess-share", type=int, default=3)
    parser.add_argument("--ngram", type=int, default=4)
    parser.add_argument("--prompts-per-set", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    args = parser.parse_args()
    rows = compression_vs_ranks(tuple(args.ranks), args.window_share, args.guess_share, args.ngram,
                                args.prompts_per_set, args.max_new_tokens)
    for row in rows:
        print(json.dumps({k: v for k, v in row.items() if k != "provenance"}))
