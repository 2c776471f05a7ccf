"""Sampling benchmark: lade (argmax window, sampled window) against plain `generate(do_sample=True)`.

    python -m lab.sampling_bench --temperatures 0.3 0.7 1.0 --per-set 2 --max-new-tokens 64 --threads 1

For each temperature and prompt, the three decoders run side by side in one process (same seed, EOS off, so
every run emits exactly max_new_tokens); rows give compression (new tokens per forward) and tokens/s, and the
summary their ratios to plain sampling. Wall-clock numbers depend on the machine's load.
"""

from __future__ import annotations

import argparse

import torch

from lade.config import LookaheadConfig
from .models import load_model
from .prompts import encode_chat, load_prompts
from .timing import timed_generate

METHODS = ("plain", "lade", "lade+sampled-window")


def _run(model, ids, method: str, config: LookaheadConfig, seed: int, gen_kw: dict) -> tuple[float, int, int]:
    """(seconds, new tokens, forward passes) of one decoding run."""
    torch.manual_seed(seed)
    cfg = None if method == "plain" else LookaheadConfig(**{**config.to_dict(), "sampling_seed": seed,
                                                            "sample_window": method != "lade"})
    new, seconds, timer = timed_generate(model, ids, torch.ones_like(ids), cfg, gen_kw)
    return seconds, new.numel(), timer.calls


def run_sampling_bench(model, tokenizer, temperatures=(0.3, 0.7, 1.0), per_set: int = 2,
                       max_new_tokens: int = 64, config: LookaheadConfig | None = None,
                       seed: int = 0) -> list[dict]:
    """One row per (temperature, prompt set, prompt, method): seconds, new_tokens, steps."""
    config = config or LookaheadConfig()
    prompts = [(name, row["prompt"]) for name in ("mt_bench", "humaneval") for row in load_prompts(name, per_set)]
    rows = []
    with torch.no_grad():
        for temperature in temperatures:
            gen_kw = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                          max_new_tokens=max_new_tokens, eos_token_id=None, pad_token_id=tokenizer.pad_token_id)
            for i, (name, prompt) in enumerate(prompts):
                ids, _ = encode_chat(tokenizer, prompt)
                for method in METHODS:
                    seconds, new, steps = _run(model, ids, method, config, seed + i, gen_kw)
                    rows.append(dict(temperature=temperature, set=name, prompt=i, method=method,
                                     seconds=seconds, new_tokens=new, steps=steps))
    return rows


def summarize(rows: list[dict]) -> list[dict]:
    """Per (temperature, set incl. "all", method): compression, tokens/s and speed relative to plain."""
    out = []
    for temperature in sorted({r["temperature"] for r in rows}):
        for name in sorted({r["set"] for r in rows}) + ["all"]:
            sel = [r for r in rows if r["temperature"] == temperature and name in (r["set"], "all")]
            rate = {}
            for method in METHODS:
                runs = [r for r in sel if r["method"] == method]
                new, steps, secs = (sum(r[k] for r in runs) for k in ("new_tokens", "steps", "seconds"))
                rate[method] = new / secs
                out.append(dict(temperature=temperature, set=name, method=method, compression=new / steps,
                                tokens_per_s=rate[method], speed_vs_plain=rate[method] / rate["plain"]))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m lab.sampling_bench", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--temperatures", type=float, nargs="+", default=[0.3, 0.7, 1.0])
    parser.add_argument("--per-set", type=int, default=2, help="prompts from each of MT-Bench and HumanEval")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--wng", type=int, nargs=3, default=[5, 4, 5], metavar=("W", "N", "G"))
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_model(args.model)
    w, n, g = args.wng
    rows = run_sampling_bench(model, tokenizer, args.temperatures, args.per_set, args.max_new_tokens,
                              LookaheadConfig(window_size=w, ngram_size=n, guess_set_size=g))
    print(f"{'temp':>5} {'set':>10} {'method':>20} {'compression':>11} {'tok/s':>7} {'vs plain':>8}")
    for s in summarize(rows):
        print(f"{s['temperature']:>5} {s['set']:>10} {s['method']:>20} {s['compression']:>11.3f} "
              f"{s['tokens_per_s']:>7.2f} {s['speed_vs_plain']:>7.2f}x")


if __name__ == "__main__":
    main()
