"""Side-by-side timing and exactness of the attention paths on one layer's shapes (used by the scripts).

A "step" here is the attention of one lookahead step: the mask the path hands the model (built once per step)
plus `layers` calls of the path's attention function on a real build_layout tree mask.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
from torch import nn
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.models.llama.modeling_llama import eager_attention_forward

from lade.attention.interface import flex_attention_forward, split_attention_forward
from lade.device import synchronize
from lade.layout import StepLayout, additive_mask, build_layout, stack_layouts
from lade.tree import TokenTree

PATH_FUNCTIONS = {"mask_sdpa": sdpa_attention_forward, "mask_eager": eager_attention_forward,
                  "split": split_attention_forward, "flex": flex_attention_forward}


def synthetic_layout(window: int, ngram: int, guesses: int, device: torch.device) -> StepLayout:
    """A steady-step layout: full window (N-1 levels of W) and G distinct candidates of N-1 tokens
    -> q = 1 + (W + G)(N - 1) tokens."""
    levels = torch.arange(3, 3 + (ngram - 1) * window).reshape(ngram - 1, window) % 90  # [N-1, W]
    candidates = [tuple(3 + (g + 17 * i) % 90 for i in range(ngram - 1)) for g in range(guesses)]  # distinct roots
    return build_layout(1, levels, TokenTree(candidates), device)


def step_mask(path: str, layout: StepLayout, past: int, dtype: torch.dtype) -> torch.Tensor:
    """The mask a path hands the model: additive [1, 1, q, past+q] for mask paths, bool [1, 1, q, q] otherwise."""
    batch = stack_layouts([layout])
    return additive_mask(batch, past, None, dtype) if path.startswith("mask") else layout.visible[None, None]


def _module(heads: int, kv_heads: int) -> nn.Module:
    module = nn.Module().eval()
    module.num_key_value_groups = heads // kv_heads
    return module


def qkv(q: int, past: int, heads: int, kv_heads: int, dim: int, dtype: torch.dtype, device: torch.device,
        seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """query [1, H, q, D], key/value [1, Hkv, past+q, D]."""
    g = torch.Generator(device=device).manual_seed(seed)
    shape_kv = (1, kv_heads, past + q, dim)
    query = torch.randn(1, heads, q, dim, generator=g, device=device) * 2
    key = torch.randn(shape_kv, generator=g, device=device) * 2
    value = torch.randn(shape_kv, generator=g, device=device)
    return query.to(dtype), key.to(dtype), value.to(dtype)


def attention_error(path: str, layout: StepLayout, past: int, heads: int, kv_heads: int, dim: int,
                    dtype: torch.dtype, device: torch.device) -> float:
    """Max abs difference of a path's output from fp64 masked attention on random inputs."""
    query, key, value = qkv(layout.size, past, heads, kv_heads, dim, dtype, device)
    module = _module(heads, kv_heads)
    got = PATH_FUNCTIONS[path](module, query, key, value, step_mask(path, layout, past, dtype), scaling=dim**-0.5)[0]
    want = eager_attention_forward(module, query.double(), key.double(), value.double(),
                                   step_mask("mask", layout, past, torch.float64), dim**-0.5)[0]
    return float((got.double() - want).abs().max())


def time_steps(paths: list[str], layout: StepLayout, past: int, heads: int, kv_heads: int, dim: int,
               dtype: torch.dtype, device: torch.device, layers: int, reps: int) -> dict[str, float]:
    """Median seconds per step of each path, the paths interleaved rep by rep (fair on a shared machine)."""
    query, key, value = qkv(layout.size, past, heads, kv_heads, dim, dtype, device)
    module = _module(heads, kv_heads)

    def step(path: str) -> Callable[[], None]:
        fn = PATH_FUNCTIONS[path]

        def run() -> None:
            mask = step_mask(path, layout, past, dtype)
            for _ in range(layers):
                fn(module, query, key, value, mask, scaling=dim**-0.5)
        return run

    runs = {path: step(path) for path in paths}
    samples: dict[str, list[float]] = {path: [] for path in paths}
    for rep in range(reps + 1):  # rep 0 warms up (and compiles flex on CUDA)
        for path, run in runs.items():
            synchronize(device)
            start = time.perf_counter()
            run()
            synchronize(device)
            if rep:
                samples[path].append(time.perf_counter() - start)
    return {path: statistics.median(times) for path, times in samples.items()}
