"""Device check for a lent GPU (e.g. the H200): latency profile of a randomly initialised Llama-2-7B-shaped
model in fp16, the (N, W, G) lade.cost would choose there, timed lade vs plain greedy on it, and the
SmolLM2 benchmark when the embedded model is present. Installs nothing; writes JSON under $OUT.

    python scripts/device_bench.py                 # on the GPU machine (OUT=... set by the runner)
    python scripts/device_bench.py --tiny --out /tmp/dev   # a 2-layer shape on the CPU, to check the script
"""

from __future__ import annotations

import argparse
import json
import os
import time
from dataclasses import asdict
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from lab.harness.bench import run_benchmark, summarize, time_generate
from lab.harness.methods import Method
from lab.harness.provenance import provenance
from lade.cost import TASKS, choose_config, measure_latency, predict

LLAMA2_7B = dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                 num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096)
TINY = dict(LLAMA2_7B, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=4)
QS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256)
CONTEXTS = (256, 2048)
CONFIGS = [(3, 1, 2), (4, 2, 2), (4, 5, 5), (5, 7, 7), (5, 15, 15), (7, 15, 15)]  # (N, W, G) timed on the model


def random_llama(shape: dict, device: torch.device, dtype: torch.dtype) -> LlamaForCausalLM:
    config = LlamaConfig(**shape, attn_implementation="sdpa")
    torch.manual_seed(0)
    with torch.device(device):
        model = LlamaForCausalLM(config).to(dtype)
    model.config._name_or_path = f"random-llama-{shape['num_hidden_layers']}L-{shape['hidden_size']}"
    return model.eval()


def repeated_prompt(seed: int, length: int = 256) -> torch.Tensor:
    """[1, length] random ids whose second half repeats the first (n-grams for the pool)."""
    g = torch.Generator().manual_seed(seed)
    half = torch.randint(3, 32000, (length // 2,), generator=g)
    return torch.cat([half, half]).unsqueeze(0)


def timed_methods(model, device: torch.device, new_tokens: int) -> list[dict]:
    methods = [Method.greedy()] + [Method.lade(*c) for c in CONFIGS]
    gen = dict(do_sample=False, max_new_tokens=new_tokens, eos_token_id=None, pad_token_id=0)
    rows = []
    for seed in range(3):
        ids = repeated_prompt(seed).to(device)
        mask = torch.ones_like(ids)
        for method in methods:
            if seed == 0:
                time_generate(model, method, ids, mask, {**gen, "max_new_tokens": 8})  # warm-up
            run = time_generate(model, method, ids, mask, gen)
            new, wall, timer = run.new[0], run.wall, run.timer
            rows.append({"seed": seed, "method": method.name, "new_tokens": int(new.numel()), "wall_s": wall,
                         "tokens_per_s": new.numel() / wall, "forward_calls": timer.calls,
                         "forward_s": timer.seconds, "host_share": 1 - timer.seconds / wall})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tiny", action="store_true", help="a 2-layer model of the same vocabulary (script check)")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "device_out")))
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--bench-n", type=int, default=5, help="prompts per set for the SmolLM2 benchmark (0: skip)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    result: dict = {"provenance": provenance(script="scripts/device_bench.py", tiny=args.tiny)}

    # 1. latency(q) of a Llama-2-7B-shaped model, and what auto would choose there
    t0 = time.perf_counter()
    model = random_llama(TINY if args.tiny else LLAMA2_7B, device, dtype)
    result["model"] = {"shape": TINY if args.tiny else LLAMA2_7B, "dtype": str(dtype),
                       "build_s": time.perf_counter() - t0}
    for context in CONTEXTS:
        profile = measure_latency(model, qs=QS, context=context, repeats=5)
        result[f"latency_context_{context}"] = asdict(profile)
        result[f"auto_context_{context}"] = {
            task: {"choice": choose_config(profile, task).to_dict(),
                   "predictions": [asdict(p) for p in predict(profile, task)]}
            for task in TASKS
        }
        print(f"context {context}:", {q: round(s * 1e3, 2) for q, s in zip(profile.qs, profile.seconds)}, "ms")
    _write(args.out, result)

    # 2. plain greedy vs fixed configs on the random model (times are real; compression of a random model is not)
    result["random_model_runs"] = timed_methods(model, device, args.new_tokens)
    _write(args.out, result)
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()

    # 3. the SmolLM2 benchmark, if the embedded model was carried to this machine
    if args.bench_n == 0:
        return
    try:
        from lab.harness.models import load_model, verify_embedded_model

        verify_embedded_model()
        smol, tok = load_model("embedded", device=str(device), dtype="float16" if device.type == "cuda" else "float32")
    except Exception as err:  # noqa: BLE001 - the model is optional on the device
        result["smollm2_bench"] = f"skipped: {type(err).__name__}: {err}"
    else:
        df = run_benchmark(smol, tok, ("mt_bench", "humaneval"), [Method.auto(), Method.lade(4, 5, 5),
                           Method.prompt_lookup(10)], 128, args.bench_n, progress=False)
        result["smollm2_bench"] = {"rows": df.to_dict("records"), "summary": summarize(df).to_dict("records")}
    _write(args.out, result)


def _write(out: Path, result: dict) -> None:
    (out / "device_bench.json").write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
