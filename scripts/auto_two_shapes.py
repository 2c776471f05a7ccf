"""Does lookahead_config="auto" decide by the device's cost? The same adaptive drafter, with SmolLM2-135M's own drafts
and acceptance, planned once with SmolLM2's latency profile and once with the profile of a randomly initialised
1B-parameter Llama-shaped model on the same machine with PyTorch's default (MKL) linears (or a flat, GPU-like
profile): how many tokens each step feeds. SmolLM2 is loaded as the lab loads it (linear layers packed for oneDNN).

    PYTHONPATH=. python scripts/auto_two_shapes.py --prompts 4 --max-new-tokens 96 --threads 1

Writes data/results/experiments/auto_two_shapes/choices.json (its provenance beside it, choices.json.provenance.json)
and prints one row per profile.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

import lade
from lab.harness.models import load_model
from lab.harness.paths import results_dir
from lab.harness.prompts import encode_chat, load_prompts
from lab.harness.provenance import provenance
from lab.harness.timing import timed_generate
from lade.cost import LatencyProfile, measure_latency
from lade.profile_cache import latency_profile

LLAMA_1B = dict(hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
                num_key_value_heads=8)


def llama_1b(vocab_size: int) -> LlamaForCausalLM:
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=vocab_size, **LLAMA_1B)).eval()
    model.config._name_or_path = "random-llama-1B-shape"
    return model


def decode_with(profile: LatencyProfile, model, prompts, max_new_tokens: int, online: bool) -> dict:
    """SmolLM2 decodes with `lookahead_config="auto"`, its planner costing steps with `profile` (passed in as the
    latency model); without `online` the planner's correction from timed steps is off (the steps are SmolLM2's, so it
    would pull every profile towards SmolLM2's own costs: right in use, but not what this comparison asks)."""
    config = lade.auto_config(model, latency=profile, draft_options=dict(correct_latency=online))
    fed, new, steps = [], 0, 0
    for ids, mask in prompts:
        run = timed_generate(model, ids, mask, config, dict(do_sample=False, eos_token_id=None,
                                                            max_new_tokens=max_new_tokens, lookahead_latency=profile))
        out, timer = run.new[0], run.timer
        fed += timer.fed[1:]
        new, steps = new + out.numel(), steps + timer.calls
    return {"online_correction": online, "config": config.label, "mean_tokens_fed": sum(fed) / len(fed),
            "one_token_steps": fed.count(1) / len(fed), "compression": new / steps,
            "latency_ratio_4": profile(4) / profile(1),
            "latency_ratio_16": profile(16) / profile(1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prompts", type=int, default=4, help="prompts from each of MT-Bench and HumanEval")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=results_dir() / "experiments" / "auto_two_shapes" / "choices.json")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model, tokenizer = load_model("embedded")
    prompts = [encode_chat(tokenizer, row["prompt"]) for name in ("mt_bench", "humaneval")
               for row in load_prompts(name, args.prompts)]
    small = latency_profile(model)
    large = measure_latency(llama_1b(model.config.vocab_size), repeats=3)
    flat = LatencyProfile("flat (memory-bound GPU-like)", small.context, small.qs,
                          tuple(small.seconds[0] * (1 + 0.002 * q) for q in small.qs))
    profiles = (("SmolLM2-135M (this CPU, packed linears)", small), ("random Llama 1B shape (this CPU, MKL)", large),
                ("flat profile (GPU-like)", flat))
    rows = {f"{name}{'' if online else ', profile only'}": decode_with(profile, model, prompts, args.max_new_tokens,
                                                                         online)
            for online in (True, False) for name, profile in profiles}
    record = {"rows": rows, "profiles": {"SmolLM2-135M": small.__dict__, "llama-1B-shape": large.__dict__}}
    prov = provenance(prompts_per_set=args.prompts, max_new_tokens=args.max_new_tokens, threads=args.threads,
                      shape=LLAMA_1B)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1, default=list))
    Path(f"{args.out}.provenance.json").write_text(json.dumps({"provenance": prov}, indent=2, default=str))
    print(f"{'latency profile':48} {'config':22} {'l(4)/l(1)':>9} {'l(16)/l(1)':>10} {'fed/step':>8} "
          f"{'1-token':>7} {'compr.':>6}")
    for name, r in rows.items():
        print(f"{name:48} {r['config']:22} {r['latency_ratio_4']:9.2f} {r['latency_ratio_16']:10.2f} "
              f"{r['mean_tokens_fed']:8.2f} {r['one_token_steps']:7.0%} {r['compression']:6.2f}")


if __name__ == "__main__":
    main()
