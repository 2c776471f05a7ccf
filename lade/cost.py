"""Device cost model: lookahead decoding (arXiv 2402.02057) trades FLOPs per step for fewer steps, so whether
it pays depends on how a step's latency grows with the tokens it feeds.

- `measure_latency` / `latency_profile`: latency(q), the fastest of a few timed forwards of q tokens at a
  representative cache length, measured on the model's device (cached as JSON per model shape, dtype and device
  in the lade cache directory, best effort).
- `predict` / `choose_config`: tokens/s of each config predicted as compression / (mean step latency + host_s),
  with compression, tokens per step and the share of one-token steps (a pool-only config feeds one token when no
  candidate matches) taken from a measured prior (lade/cost_prior.py); the fastest config, or a disabled one
  (plain decoding) when none is predicted to beat plain decoding by `min_speedup`. lade.auto uses these.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from transformers.cache_utils import DynamicCache, EncoderDecoderCache

from .adapters import position_limit
from .cache import crop
from .config import LookaheadConfig
from .cpu_linear import packed_linear_count
from .cost_prior import PRIOR
from .device import device_description, synchronize
from .encoder_decoder import EncoderDecoderCall
from .layout import build_layout, stack_layouts
from .model_call import ModelCall
from .user_cache import cache_dir
from .tree import TokenTree

LATENCY_QS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)  # tokens per step measured
CONTEXT = 256  # cached tokens during the measurement (a typical prompt plus some output)
SOURCE = 64  # source tokens an encoder-decoder model's decoder attends to during the measurement
HOST_S = 5e-4  # lookahead's per-step work outside the forward beyond plain decoding's (measured ~0.5 ms on CPU)
MIN_SPEEDUP = 1.05  # predicted gain a config needs before auto prefers it to plain decoding
TASKS = ("chat", "code", "mixed")
STEP_VERSION = 2  # bumped when a step's forward changes cost (v2: masked sdpa steps read grouped heads in place)


@dataclass(frozen=True)
class LatencyProfile:
    """seconds[i]: fastest time of one forward of qs[i] tokens with `context` cached tokens, on device `key`."""

    key: str
    context: int
    qs: tuple[int, ...]
    seconds: tuple[float, ...]

    def __call__(self, q: float) -> float:
        """Latency of a q-token step: linear interpolation, linear extrapolation past the last measured q with the
        last segment's slope, never negative (a last time that dips, as noise or a kernel change can make it, must
        not extrapolate to zero or negative latency)."""
        qs, s = np.asarray(self.qs, dtype=float), np.asarray(self.seconds, dtype=float)
        if q > qs[-1] and len(qs) > 1:
            return float(s[-1] + (q - qs[-1]) * max(0.0, (s[-1] - s[-2]) / (qs[-1] - qs[-2])))
        return float(np.interp(q, qs, s))

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str) -> "LatencyProfile":
        raw = json.loads(text)
        return cls(raw["key"], raw["context"], tuple(raw["qs"]), tuple(raw["seconds"]))


def device_key(model) -> str:
    """What latency depends on: the model's name and shape, dtype, attention implementation, linear kernel (oneDNN
    packed or not), device (and CPU threads), and how lade runs a step (STEP_VERSION: a cached profile of an older
    step is measured again)."""
    config = model.config.get_text_config(decoder=True)
    name = getattr(model.config, "_name_or_path", "") or type(model).__name__
    shape = [getattr(config, key, None) for key in ("num_hidden_layers", "hidden_size", "num_attention_heads",
                                                    "num_key_value_heads", "intermediate_size", "vocab_size")]
    attn = getattr(model.config, "_attn_implementation", None)
    packed = packed_linear_count(model)
    linears = f"|packed linears {packed}" if packed else ""
    return (f"{name}|{type(model).__name__}{shape}|{model.dtype}|{attn}{linears}|{device_description(model.device)}"
            f"|step v{STEP_VERSION}")


def _measurement_call(model, generator: torch.Generator) -> ModelCall:
    """The call a real step goes through; an encoder-decoder model's decoder attends to a random encoded source."""
    if not model.config.is_encoder_decoder:
        return ModelCall(model, DynamicCache(config=model.config))
    source = torch.randint(model.config.vocab_size, (1, SOURCE), generator=generator).to(model.device)  # [1, S]
    cache = EncoderDecoderCache(DynamicCache(config=model.config), DynamicCache(config=model.config))
    return EncoderDecoderCall(model, cache, "mask", model.get_encoder()(input_ids=source), None)


def measurement_shape(model, qs: Sequence[int], context: int) -> tuple[tuple[int, ...], int]:
    """(qs, context) that fit the model's position table: steps of at most half of it, context in the rest."""
    config = model.config.get_text_config(decoder=True)
    limit = position_limit(model) or getattr(config, "max_position_embeddings", None)
    if not limit:
        return tuple(qs), context
    fitting = tuple(q for q in qs if q <= limit // 2) or (1,)
    return fitting, max(1, min(context, limit - max(fitting)))


@torch.inference_mode()
def measure_latency(model, qs: Sequence[int] = LATENCY_QS, context: int = CONTEXT, repeats: int = 5) -> LatencyProfile:
    """Time `repeats` forwards of each q (after one warm-up round) at `context` cached random tokens (both cut to
    fit the model's position table).

    Each step goes through lade's own layout and model call (4-D mask, logical positions), so the times include
    what a real step pays; the q values are interleaved so machine noise hits them alike, and the fastest repeat is
    kept (other jobs on the machine only ever add time). Every row's logits are computed, so steps with several
    window levels (whose lower levels need no logits) cost a little less.
    """
    qs, context = measurement_shape(model, qs, context)
    device = model.device
    generator = torch.Generator().manual_seed(0)
    call = _measurement_call(model, generator)
    prompt = torch.randint(model.config.vocab_size, (1, context), generator=generator).to(device)  # [1, C]
    call.prefill(prompt)
    times: dict[int, list[float]] = {q: [] for q in qs}
    for round_ in range(repeats + 1):
        for q in qs:
            window = prompt[:, : q - 1]  # [1, q-1]: one level, so the step feeds q tokens
            batch = stack_layouts([build_layout(int(prompt[0, -1]), window, TokenTree([]), device)])
            synchronize(device)
            start = time.perf_counter()
            call.step(batch, torch.tensor([context], device=device), context, None)
            synchronize(device)
            if round_:
                times[q].append(time.perf_counter() - start)
            crop(call.cache, context)  # drop the step's KV again
    return LatencyProfile(device_key(model), context, tuple(qs), tuple(min(times[q]) for q in qs))


def latency_profile(model, cache: Path | None = None, refresh: bool = False, **measure_kwargs) -> LatencyProfile:
    """The model's latency profile, measured once and cached in `<lade cache>/cost/latency-<hash>.json`. Caching is
    best effort: an unwritable cache directory gives a warning and the measured profile."""
    key = device_key(model)
    path = (cache or cache_dir()) / "cost" / f"latency-{hashlib.sha1(key.encode()).hexdigest()[:16]}.json"
    if path.exists() and not refresh:
        profile = LatencyProfile.from_json(path.read_text())
        if profile.key == key:
            return profile
    profile = measure_latency(model, **measure_kwargs)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.partial")
        partial.write_text(profile.to_json())
        os.replace(partial, path)  # atomic: a process reading the cache never sees a half-written profile
    except OSError as error:
        warnings.warn(f"lade could not cache the latency profile in {path} ({error}); it will be measured again next "
                      "time: set LADE_CACHE to a writable folder", stacklevel=2)
    return profile


@dataclass(frozen=True)
class Prediction:
    config: tuple[int, ...]  # LookaheadConfig.key: (N, W, G) or (N, W, G, pool capacity, match tokens)
    compression: float  # expected new tokens per step
    step_tokens: float  # expected tokens fed per step
    speedup: float  # predicted tokens/s relative to plain decoding


def step_latency(latency, step_tokens: float, single_share: float) -> float:
    """Mean latency of a step mix: a share `single_share` of one-token steps, the rest of equal size, together
    feeding `step_tokens` tokens per step on average."""
    if single_share >= 1.0:
        return latency(1)
    wide = (step_tokens - single_share) / (1.0 - single_share)  # tokens of a step that is not a one-token step
    return single_share * latency(1) + (1.0 - single_share) * latency(wide)


def prior_table(task: str, prior: Mapping = PRIOR) -> dict[tuple[int, ...], tuple[float, float, float]]:
    """config key -> (compression, step_tokens, single_share) for "chat", "code" or "mixed" (their mean)."""
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    if task != "mixed":
        return dict(prior[task])
    common = set(prior["chat"]) & set(prior["code"])
    return {k: tuple((a + b) / 2 for a, b in zip(prior["chat"][k], prior["code"][k])) for k in sorted(common)}


def predict(latency, task: str = "mixed", host_s: float = HOST_S, prior: Mapping = PRIOR) -> list[Prediction]:
    """Predicted speedup over plain decoding of every prior config, fastest first.

    latency: q -> seconds (a LatencyProfile or any callable).
    speedup = compression * latency(1) / (step_latency(latency, step_tokens, single_share) + host_s).
    """
    plain = latency(1)
    predictions = [
        Prediction(config, c, q, c * plain / (step_latency(latency, q, s) + host_s))
        for config, (c, q, s) in prior_table(task, prior).items()
    ]
    return sorted(predictions, key=lambda p: -p.speedup)


def choose_config(latency, task: str = "mixed", min_speedup: float = MIN_SPEEDUP, host_s: float = HOST_S,
                  prior: Mapping = PRIOR, **config_fields) -> LookaheadConfig:
    """The predicted fastest config, or LookaheadConfig(enabled=False) if it gains less than `min_speedup`."""
    best = predict(latency, task, host_s, prior)[0]
    if best.speedup < min_speedup:
        return LookaheadConfig(enabled=False, **config_fields)
    return LookaheadConfig.from_key(best.config, **config_fields)
