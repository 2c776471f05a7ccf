"""Sampling benchmark from the command line: lade (argmax window, sampled window) against plain
`generate(do_sample=True)`, through the notebooks' harness (lab.studies.experiments.run_sampling, rows
SAMPLING_COLUMNS).

    python -m lab.studies.sampling_bench --temperatures 0.3 0.7 1.0 --per-set 2 --max-new-tokens 64 --threads 1

For each temperature and prompt, the three decoders run side by side in one process (same seed, EOS off, so
every run emits exactly max_new_tokens); the summary gives per prompt set and method the compression (new tokens
per forward) and the speedup over plain sampling with 95% intervals. Wall-clock numbers depend on the machine's load.
"""

from __future__ import annotations

import argparse

import pandas as pd
import torch

from lab.harness.models import load_model
from lab.studies.experiments import run_sampling
from lade.config import LookaheadConfig

SETS = ("mt_bench", "humaneval")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m lab.studies.sampling_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--temperatures", type=float, nargs="+", default=[0.3, 0.7, 1.0])
    parser.add_argument("--per-set", type=int, default=2, help="prompts from each of MT-Bench and HumanEval")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--config", default="4,5,5", help="lookahead config label N,W,G (LookaheadConfig.label)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_model(args.model)
    df = run_sampling(model, tokenizer, SETS, args.temperatures, LookaheadConfig.from_label(args.config),
                      args.per_set, args.max_new_tokens, sampled_window=True, prompt_format="chat")
    summary = pd.DataFrame(df.attrs["summary"])
    with pd.option_context("display.width", 200, "display.max_rows", 500):
        print(summary.to_string(index=False, float_format=lambda x: f"{x:.3f}"))


if __name__ == "__main__":
    main()
