"""Lookahead vs plain greedy on the embedded SmolLM2-135M in fp32, bitsandbytes 8-bit and 4-bit (NF4).

For each precision and prompt: plain greedy, then lade, on the same model, side by side; prints the step
compression (new tokens / lade steps), tokens/s of both and the speedup, and checks the outputs match.

    PYTHONPATH=. python scripts/bench_quantized.py --prompts 3 --max-new-tokens 96
"""

from __future__ import annotations

import argparse

import torch
from transformers import BitsAndBytesConfig
from transformers.cache_utils import DynamicCache

import lade
from lab.harness.models import load_model
from lab.harness.prompts import encode_chat, load_prompts
from lab.harness.timing import timed

PRECISIONS = {
    "fp32": None,
    "int8": BitsAndBytesConfig(load_in_8bit=True),  # quantizes activations: output may drift (see lade/quantization.py)
    "nf4": BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.float32),
}


@torch.no_grad()
def step_ms(model, ids: torch.Tensor, width: int, repeats: int = 5) -> float:
    """Median ms of one cached forward of `width` tokens after the prompt `ids` [1, P]."""
    cache = DynamicCache(config=model.config)
    model(ids, past_key_values=cache, use_cache=True)
    step = ids[:, -1:].repeat(1, width)  # [1, width]
    times = []
    for _ in range(repeats):
        _, t = timed(model, step, past_key_values=cache, use_cache=True)
        cache.crop(-width)
        times.append(t)
    return 1e3 * sorted(times)[len(times) // 2]


def bench(precision: str, prompts: list[str], config: lade.LookaheadConfig, max_new_tokens: int) -> dict:
    model, tok = load_model("embedded", quantization_config=PRECISIONS[precision])
    width = config.max_step_tokens()  # a lade step, at most
    ids, _ = encode_chat(tok, prompts[0])
    cost = (step_ms(model, ids, 1), step_ms(model, ids, width))
    kw = dict(do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=None)
    tokens = steps = 0
    plain_s = lade_s = 0.0
    exact = True
    for prompt in prompts:
        ids, mask = encode_chat(tok, prompt)
        ref, t_plain = timed(model.generate, ids, attention_mask=mask, **kw)
        (out, stats), t_lade = timed(lade.generate, model, ids, config, attention_mask=mask, return_stats=True, **kw)
        exact &= torch.equal(out, ref)
        tokens += stats.new_tokens
        steps += stats.steps
        plain_s += t_plain
        lade_s += t_lade
    return dict(precision=precision, step1_ms=cost[0], stepq_ms=cost[1], compression=tokens / steps,
                plain_tps=tokens / plain_s, lade_tps=tokens / lade_s, speedup=plain_s / lade_s, exact=exact)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=3, help="prompts per set (MT-Bench and HumanEval)")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--window", type=int, default=4)
    parser.add_argument("--ngram", type=int, default=3)
    parser.add_argument("--guess", type=int, default=4)
    parser.add_argument("--precisions", nargs="+", default=list(PRECISIONS), choices=list(PRECISIONS))
    args = parser.parse_args()
    prompts = [row["prompt"] for name in ("mt_bench", "humaneval") for row in load_prompts(name, args.prompts)]
    config = lade.LookaheadConfig(window_size=args.window, ngram_size=args.ngram, guess_set_size=args.guess)
    print(f"{len(prompts)} prompts, {args.max_new_tokens} new tokens, {config}, {torch.get_num_threads()} threads")
    print(f"{'precision':>9} {'1-token step ms':>15} {'full step ms':>12} {'compression':>11} {'plain tok/s':>11} "
          f"{'lade tok/s':>10} {'speedup':>7} exact")
    for precision in args.precisions:
        r = bench(precision, prompts, config, args.max_new_tokens)
        print(f"{r['precision']:>9} {r['step1_ms']:>15.1f} {r['stepq_ms']:>12.1f} {r['compression']:>11.2f} "
              f"{r['plain_tps']:>11.2f} {r['lade_tps']:>10.2f} "
              f"{r['speedup']:>6.2f}x {r['exact']}", flush=True)


if __name__ == "__main__":
    main()
