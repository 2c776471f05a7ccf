"""Device check of lade's attention paths on a CUDA GPU (prepared for a lent H200; installs nothing).

1. environment: versions, GPU, flash-attn presence, the prefix kernel chosen per dtype;
2. exactness: every path and every applicable prefix kernel vs fp64 masked attention, fp32/bf16/fp16;
3. attention latency per step (32 layers, 32 query / 8 kv heads, head dim 128, bf16) vs tokens per step and
   cache length, all paths interleaved;
4. end to end: greedy lade equals plain greedy on tiny fp32 models with each path (and a flash_attention_2
   model when flash-attn is installed);
5. model step latency: one lookahead forward of a random 1B-class llama (bf16) per path vs q and cache length.
Results go to $OUT/attention_check.json (rewritten after each section, so a timeout keeps what finished).

Usage (repository root): PYTHONPATH=.:tests python scripts/device_attention_check.py [--quick] [--cpu]
--cpu runs the same sections with tiny sizes on the CPU (a dry run of the script itself).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path

import torch
import transformers

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import lade  # noqa: E402
from lab.studies.attention_timing import attention_error, qkv, synthetic_layout, time_steps  # noqa: E402
from lade.attention.kernels import flash_attn_available, prefix_kernel, split_attention  # noqa: E402
from lade.device import synchronize  # noqa: E402
from lade.layout import stack_layouts  # noqa: E402
from lade.model_call import ModelCall  # noqa: E402

CONFIGS = [(2, 3, 2), (5, 4, 5), (7, 5, 7), (15, 5, 15)]  # (W, N, G): q = 9, 31, 57, 121
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
CUDA_KERNELS = ["flash_attn", "sdpa_flash_cuda", "sdpa_efficient_cuda", "math"]


def environment(device: torch.device) -> dict:
    q = torch.zeros(1, 1, 1, 128, device=device)
    return dict(torch=torch.__version__, transformers=transformers.__version__, lade=lade.__file__,
                gpu=torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                flash_attn=flash_attn_available(),
                prefix_kernel={name: prefix_kernel(q.to(dtype)) for name, dtype in DTYPES.items()})


def exactness(device: torch.device, sizes: dict) -> list[dict]:
    kernels = CUDA_KERNELS if device.type == "cuda" else ["sdpa_flash_cpu", "math"]
    rows = []
    for dtype_name, dtype in DTYPES.items():
        for window, ngram, guesses in CONFIGS[:3]:
            layout = synthetic_layout(window, ngram, guesses, device)
            for past in sizes["exact_pasts"]:
                row = dict(dtype=dtype_name, q=layout.size, past=past, errors={})
                for path in ("mask_sdpa", "mask_eager", "split", "flex"):
                    row["errors"][path] = _try(attention_error, path, layout, past, 8, 2, 128, dtype, device)
                query, key, value = qkv(layout.size, past, 8, 2, 128, dtype, device, seed=1)
                want = _reference(query, key, value, layout.visible)
                for kernel in kernels:
                    if kernel == "flash_attn" and not flash_attn_available():
                        continue
                    got = _try(split_attention, query, key, value, layout.visible, 128**-0.5, kernel)
                    row["errors"][f"split[{kernel}]"] = (float((got.double() - want).abs().max())
                                                        if isinstance(got, torch.Tensor) else got)
                rows.append(row)
    return rows


def _reference(query, key, value, visible) -> torch.Tensor:
    """fp64 masked attention -> [B, H, q, D]."""
    past = key.shape[2] - query.shape[2]
    mask = torch.ones(query.shape[2], key.shape[2], dtype=torch.bool, device=query.device)
    mask[:, past:] = visible
    return torch.nn.functional.scaled_dot_product_attention(
        query.double(), key.double(), value.double(), attn_mask=mask, scale=128**-0.5,
        enable_gqa=True)


def attention_latency(device: torch.device, sizes: dict) -> list[dict]:
    rows = []
    for window, ngram, guesses in CONFIGS:
        layout = synthetic_layout(window, ngram, guesses, device)
        for past in sizes["pasts"]:
            times = time_steps(["mask_sdpa", "mask_eager", "split", "flex"], layout, past, sizes["heads"],
                               sizes["kv_heads"], sizes["dim"], sizes["dtype"], device, sizes["layers"], sizes["reps"])
            rows.append(dict(q=layout.size, past=past, ms={k: 1e3 * v for k, v in times.items()}))
            timings = " ".join(f"{k}={1e3 * v:.3f}ms" for k, v in times.items())
            print(f"attention q={layout.size} past={past}: {timings}", flush=True)
    return rows


def end_to_end(device: torch.device, sizes: dict) -> list[dict]:
    from tiny_models import random_prompt, tiny_model

    greedy = dict(do_sample=False, max_new_tokens=sizes["new_tokens"], eos_token_id=None)
    rows = []
    for arch in ("llama", "qwen3", "gpt2"):
        model = tiny_model(arch, "sdpa").to(device)
        for attention in ("mask", "split", "flex", "auto"):
            config = lade.LookaheadConfig(window_size=4, ngram_size=3, guess_set_size=4, attention=attention)
            equal = []
            for i in range(sizes["prompts"]):
                ids = random_prompt(500 + i).to(device)
                want = model.generate(ids, attention_mask=torch.ones_like(ids), **greedy)
                got = _try(lade.generate, model, ids, config, **greedy)
                equal.append(bool(torch.equal(got, want)) if isinstance(got, torch.Tensor) else got)
            rows.append(dict(arch=arch, attention=attention, equal=equal))
            print(f"e2e {arch} {attention}: {equal}", flush=True)
    if flash_attn_available():
        rows.append(dict(arch="llama-bf16-flash_attention_2", **_flash_model_check(device, greedy)))
    return rows


def _flash_model_check(device: torch.device, greedy: dict) -> dict:
    """A bf16 model with the real FA2 kernel: lade (auto -> split) vs the same model's plain greedy. bf16
    kernels round differently, so report the agreement instead of asserting it."""
    from tiny_models import random_prompt, tiny_model

    model = tiny_model("llama", "sdpa", hidden_size=256, intermediate_size=512, num_attention_heads=4,
                       num_key_value_heads=2).to(device, torch.bfloat16)
    model.set_attn_implementation("flash_attention_2")
    agree = []
    for i in range(4):
        ids = random_prompt(600 + i).to(device)
        want = model.generate(ids, attention_mask=torch.ones_like(ids), **greedy)
        got = lade.generate(model, ids, lade.LookaheadConfig(window_size=4, ngram_size=3, guess_set_size=4), **greedy)
        agree.append(float((got == want).float().mean()))
    return dict(chosen=lade.attention.choose_attention("auto", model), token_agreement=agree,
                implementation_after=model.config._attn_implementation)


def model_step_latency(device: torch.device, sizes: dict) -> list[dict]:
    from tiny_models import tiny_model

    model = tiny_model("llama", "sdpa", **sizes["model"]).to(device, sizes["dtype"])
    rows = []
    for window, ngram, guesses in CONFIGS:
        layout = synthetic_layout(window, ngram, guesses, device)
        batch = stack_layouts([layout])
        for past in sizes["pasts"]:
            row = dict(q=layout.size, past=past, ms={})
            calls = {}
            for path in ("mask", "split", "flex"):
                calls[path] = ModelCall(model, _filled_cache(model, past, device), path)
            for rep in range(sizes["reps"] + 1):
                for path, call in calls.items():
                    synchronize(device)
                    start = time.perf_counter()
                    with torch.no_grad():
                        call.step(batch, torch.tensor([past], device=device), past, None)
                    synchronize(device)
                    call.cache.crop(-layout.size)
                    if rep:
                        row["ms"].setdefault(path, []).append(1e3 * (time.perf_counter() - start))
            row["ms"] = {k: sorted(v)[len(v) // 2] for k, v in row["ms"].items()}
            rows.append(row)
            print(f"model step q={layout.size} past={past}: {row['ms']}", flush=True)
    return rows


def _filled_cache(model, past: int, device: torch.device):
    from transformers.cache_utils import DynamicCache

    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model(torch.randint(3, 90, (1, past), device=device), cache=cache, use_cache=True)
    return cache



def _try(fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except Exception as e:  # a device check reports failures instead of stopping at the first one
        return f"error: {type(e).__name__}: {str(e)[:300]}"


def sizes_for(device: torch.device, quick: bool) -> dict:
    if device.type == "cpu":
        return dict(exact_pasts=[0, 70], pasts=[64], heads=4, kv_heads=2, dim=32, layers=2, reps=1,
                    dtype=torch.float32, new_tokens=12, prompts=1,
                    model=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2))
    return dict(exact_pasts=[0, 1, 300, 4096], pasts=[512, 2048] if quick else [512, 2048, 8192], heads=32,
                kv_heads=8, dim=128, layers=32, reps=5 if quick else 10, dtype=torch.bfloat16,
                new_tokens=40, prompts=3 if quick else 6,
                model=dict(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=16,
                           num_attention_heads=32, num_key_value_heads=8))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer cache lengths and repetitions")
    parser.add_argument("--cpu", action="store_true", help="dry run on the CPU with tiny sizes")
    args = parser.parse_args()
    if not args.cpu and not torch.cuda.is_available():
        print("device_attention_check: CUDA is not available on this machine; nothing to check. "
              "Run it on the lent GPU, or pass --cpu for a dry run with tiny sizes.")
        sys.exit(2)
    device = torch.device("cpu" if args.cpu else "cuda")
    out = Path(os.environ.get("OUT", ".")) / "attention_check.json"
    sizes = sizes_for(device, args.quick)
    results: dict = {"sizes": {k: str(v) for k, v in sizes.items()}}
    sections = [("environment", environment), ("exactness", exactness), ("attention_latency", attention_latency),
                ("end_to_end", end_to_end), ("model_step_latency", model_step_latency)]
    for name, section in sections:
        start = time.perf_counter()
        try:
            results[name] = section(device) if name == "environment" else section(device, sizes)
        except Exception:
            results[name] = {"error": traceback.format_exc()[-2000:]}
        results[f"{name}_seconds"] = round(time.perf_counter() - start, 1)
        out.write_text(json.dumps(results, indent=1))
        print(f"[{name}] done in {results[f'{name}_seconds']} s -> {out}", flush=True)


if __name__ == "__main__":
    main()
