"""Device cost model: lookahead decoding (arXiv 2402.02057) trades FLOPs per step for fewer steps, so whether
it pays depends on how a step's latency grows with the tokens it feeds, and on the host work a step costs.

- `measure_latency`: latency(q), the fastest of a few timed forwards of q tokens at a representative cache
  length, measured on the model's device together with the host work of a step there (a drafting row's,
  lade.host_cost); lade.profile_cache caches it per model shape, dtype and device, and lade.profile combines the
  profiles of a few row counts (and of a longer context) into every step's cost.
- `predict` / `choose_config`: each config's speedup over plain decoding, priced by lade.pricing (the one rule)
  with compression, tokens per step and the share of one-token steps (a pool-only config feeds one token when no
  candidate matches) taken from a measured prior (lade/cost_prior.py); the fastest config, or a disabled one
  (plain decoding) when none pays. lade.auto uses these.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np
import torch
from transformers.cache_utils import DynamicCache, EncoderDecoderCache

from .cache import crop
from .compat import attn_implementation, model_name
from .config import LookaheadConfig
from .cost_prior import PRIOR
from .cpu_linear import packed_linear_count
from .device import device_description, synchronize
from .encoder_decoder import EncoderDecoderCall
from .host_cost import HostTimer, drafting_seconds
from .layout import build_layout, stack_layouts
from .model_call import ModelCall
from .pricing import THRESHOLD, Costs, Plan, pays, speedup, step_seconds
from .tree import TokenTree
from .vocabulary import input_vocab, position_limit
from .windows import model_window

LATENCY_QS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)  # tokens per step measured
BATCH_QS = (1, 2, 3, 4, 6, 8, 12, 16)  # tokens per row and step measured for a batch (profiles with rows > 1)
CONTEXT = 256  # cached tokens during the measurement (a typical prompt plus some output)
LONG_CONTEXT = 2048  # cached tokens of the second, one-row measurement that prices long calls (lade.profile)
LONG_QS = (1, 4, 16, 64)  # tokens per step measured at LONG_CONTEXT
SOURCE = 64  # source tokens an encoder-decoder model's decoder attends to during the measurement
TASKS = ("chat", "code", "mixed")
STEP_VERSION = 3  # bumped when a step's cost or the profile's format changes (v3: host work measured with it)
FLOOR = 0.6  # a usable profile times no step under FLOOR x its smallest step (which it does all the work of)


HOST_FIELDS = ("host_s", "loop_s")


class ProfileError(ValueError):
    """A latency profile that cannot steer "auto" (the message says why)."""


@dataclass(frozen=True)
class LatencyProfile:
    """seconds[i]: fastest time of one forward of qs[i] tokens with `context` cached tokens, on device `key`; host_s
    and loop_s: a drafting row's work per step outside the forward, and lade's loop's per row and step, measured
    there too (lade.host_cost; 0 where not measured)."""

    key: str
    context: int
    qs: tuple[int, ...]
    seconds: tuple[float, ...]
    host_s: float = 0.0
    loop_s: float = 0.0

    def __call__(self, q: float) -> float:
        """Latency of a q-token step: linear interpolation, linear extrapolation past the last measured q with the
        last segment's slope, never negative (a last time that dips, as noise or a kernel change can make it, must
        not extrapolate to zero or negative latency). Non-decreasing in q: a time above a wider step's counts as
        that step's, so no wider step is priced cheaper than a narrower one (a draft never looks better than free)."""
        return rising(self.qs, self.seconds, q)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_json(cls, text: str | bytes) -> "LatencyProfile":
        """The profile a cache file holds; ProfileError (saying why) unless it is usable (`check`)."""
        try:
            raw = json.loads(text)
        except (ValueError, RecursionError) as error:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise ProfileError(f"not valid JSON: {error}") from None
        fields = list(cls.__dataclass_fields__)
        if not isinstance(raw, dict) or set(raw) != set(fields):
            found = sorted(raw) if isinstance(raw, dict) else type(raw).__name__
            raise ProfileError(f"expected the fields {fields}, found {found}")
        if not isinstance(raw["key"], str) or not _is_int(raw["context"]):
            raise ProfileError("key must be a string and context an integer")
        for name in ("qs", "seconds"):
            if not isinstance(raw[name], list) or not all(_is_number(v) for v in raw[name]):
                raise ProfileError(f"{name} must be a list of numbers")
        if not all(_is_int(q) for q in raw["qs"]):
            raise ProfileError("qs must be whole token counts")
        if not all(_is_number(raw[name]) and math.isfinite(raw[name]) and raw[name] >= 0 for name in HOST_FIELDS):
            raise ProfileError(f"{' and '.join(HOST_FIELDS)} must be finite non-negative seconds")
        profile = cls(raw["key"], raw["context"], tuple(raw["qs"]), tuple(float(s) for s in raw["seconds"]),
                      *(float(raw[name]) for name in HOST_FIELDS))
        profile.check()
        return profile

    def check(self) -> None:
        """ProfileError unless the profile is usable (`problem`)."""
        problem = self.problem()
        if problem is not None:
            raise ProfileError(problem)

    def problem(self) -> str | None:
        """Why the profile cannot steer auto, None if it can: usable means context > 0; qs non-empty, positive,
        strictly increasing; one finite positive time per q; and monotone enough: no step timed under FLOOR x the
        smallest step. A step of more tokens does all the work of the smallest and more, so a real profile only dips
        below it by timing noise (a flat, memory-bound device times all steps about equal; kernel changes make dips
        between larger steps, which are allowed); reversed or garbled timings would steer auto to wide steps that are
        not cheap."""
        qs, seconds = self.qs, self.seconds
        if self.context < 1:
            return f"context {self.context} is not positive"
        if not qs or len(qs) != len(seconds):
            return f"{len(qs)} step sizes and {len(seconds)} times: need one time per step size, at least one"
        if qs[0] < 1 or any(b <= a for a, b in zip(qs, qs[1:])):
            return f"step sizes {list(qs)} are not positive and increasing"
        if not all(math.isfinite(t) and t > 0 for t in seconds):
            return f"times {list(seconds)} are not all finite and positive"
        fastest = min(range(len(qs)), key=lambda i: seconds[i])
        if seconds[fastest] < FLOOR * seconds[0]:
            return (f"a {qs[fastest]}-token step is timed at {seconds[fastest]:.3g} s, under {FLOOR} x the "
                    f"{qs[0]}-token step's {seconds[0]:.3g} s")
        return None


def rising(qs: Sequence[float], values: Sequence[float], q: float) -> float:
    """values (one per ascending q of qs) at q, made non-decreasing (each value lowered to the smallest at or after
    it), interpolated linearly, extrapolated past the last q with the last segment's slope, never below the last."""
    at = np.asarray(qs, dtype=float)
    v = np.minimum.accumulate(np.asarray(values, dtype=float)[::-1])[::-1]  # [len(qs)] suffix minimum
    if q > at[-1] and len(at) > 1:
        return float(v[-1] + (q - at[-1]) * max(0.0, (v[-1] - v[-2]) / (at[-1] - at[-2])))
    return float(np.interp(q, at, v))


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def device_key(model, rows: int = 1, long: bool = False) -> str:
    """What latency depends on: the model's name and shape, dtype, attention implementation, linear kernel (oneDNN
    packed or not), device (and CPU threads), how lade runs a step (STEP_VERSION: a cached profile of an older
    step is measured again), and the rows a step feeds (a profile of batched steps, rows > 1); long: the profile at
    the longer context (LONG_CONTEXT)."""
    config = model.config.get_text_config(decoder=True)
    name = model_name(model.config) or type(model).__name__
    shape = [getattr(config, key, None) for key in ("num_hidden_layers", "hidden_size", "num_attention_heads",
                                                    "num_key_value_heads", "intermediate_size", "vocab_size")]
    attn = attn_implementation(model.config)
    packed = packed_linear_count(model)
    linears = f"|packed linears {packed}" if packed else ""
    return (f"{name}|{type(model).__name__}{shape}|{model.dtype}|{attn}{linears}|{device_description(model.device)}"
            f"|step v{STEP_VERSION}" + (f"|rows {rows}" if rows > 1 else "") + ("|long context" if long else ""))


def _measurement_call(model, generator: torch.Generator, rows: int = 1) -> ModelCall:
    """The call a real step goes through; an encoder-decoder model's decoder attends to a random encoded source."""
    if not model.config.is_encoder_decoder:
        return ModelCall(model, DynamicCache(config=model.config))
    source = torch.randint(input_vocab(model), (rows, SOURCE), generator=generator).to(model.device)  # [R, S]
    cache = EncoderDecoderCache(DynamicCache(config=model.config), DynamicCache(config=model.config))
    return EncoderDecoderCall(model, cache, "mask", model.get_encoder()(input_ids=source), None)


def measurement_shape(model, qs: Sequence[int], context: int) -> tuple[tuple[int, ...], int]:
    """(qs, context) that fit the model's position table and attention window: steps of at most half of the
    narrower, context in the rest."""
    config = model.config.get_text_config(decoder=True)
    limit = min(filter(None, (position_limit(model) or getattr(config, "max_position_embeddings", None),
                              model_window(model))), default=None)
    if not limit:
        return tuple(qs), context
    fitting = tuple(q for q in qs if q <= limit // 2) or (1,)
    return fitting, max(1, min(context, limit - max(fitting)))


@torch.inference_mode()
def measure_latency(model, qs: Sequence[int] = LATENCY_QS, context: int = CONTEXT, repeats: int = 5,
                    rows: int = 1, long: bool = False) -> LatencyProfile:
    """Time `repeats` forwards of each q (after one warm-up round) at `context` cached random tokens (both cut to
    fit the model's position table); rows > 1: steps of `rows` sequences feeding q tokens each, [rows, q], as a
    batch (or the beams of beam search) feeds them. Around the forwards, the host work of a step on this device
    (lade.host_cost): lade's loop's per row, and a drafting row's.

    Each step goes through lade's own layout and model call (4-D mask, logical positions), so the times include
    what a real step pays; the q values are interleaved so machine noise hits them alike, and the fastest repeat is
    kept (other jobs on the machine only ever add time). Every row's logits are computed, so steps with several
    window levels (whose lower levels need no logits) cost a little less. long: keyed as the long-context profile.
    """
    qs, context = measurement_shape(model, qs, context)
    device = model.device
    generator = torch.Generator().manual_seed(0)
    call = _measurement_call(model, generator, rows)
    prompt = torch.randint(input_vocab(model), (rows, context), generator=generator).to(device)  # [R, C]
    call.prefill(prompt)
    first = torch.full((rows,), context, device=device)  # [R]
    times: dict[int, list[float]] = {q: [] for q in qs}
    loop = HostTimer()
    for round_ in range(repeats + 1):
        for q in qs:
            host = time.perf_counter()
            # each row one window level of q - 1 tokens, so the step feeds [rows, q]
            batch = stack_layouts([build_layout(int(prompt[r, -1]), prompt[r : r + 1, : q - 1], TokenTree([]), device)
                                   for r in range(rows)])
            synchronize(device)
            start = time.perf_counter()
            logits = call.step(batch, first, context, None)  # [R, q, V]
            synchronize(device)
            end = time.perf_counter()
            logits[:, 0].argmax(-1).tolist()  # [R] the loop reads each row's token
            crop(call.cache, context)  # drop the step's KV again
            if round_:
                times[q].append(end - start)
                if q == qs[0]:
                    loop.add(start - host + time.perf_counter() - end, rows)
    width = logits.shape[-1]  # the drafters' vocabulary: ids of the logits (an input vocabulary can be larger)
    host_s = drafting_seconds(prompt[0].cpu().remainder(width), width)
    return LatencyProfile(device_key(model, rows, long), context, tuple(qs), tuple(min(times[q]) for q in qs), host_s,
                          loop.median())


@dataclass(frozen=True)
class Prediction:
    config: tuple[int, ...]  # LookaheadConfig.key: (N, W, G) or (N, W, G, pool capacity, match tokens)
    compression: float  # expected new tokens per step
    step_tokens: float  # expected tokens fed per step
    speedup: float  # predicted tokens/s relative to plain decoding


def step_latency(latency, step_tokens: float, single_share: float) -> float:
    """Mean latency of a step mix: a share `single_share` of one-token steps, the rest of equal size, together
    feeding `step_tokens` tokens per step on average (lade.pricing.step_seconds with no host work)."""
    return step_seconds(Costs.of_latency(latency), Plan(tokens=step_tokens, single_share=single_share, drafting=0))


def prior_table(task: str, prior: Mapping = PRIOR) -> dict[tuple[int, ...], tuple[float, float, float]]:
    """config key -> (compression, step_tokens, single_share) for "chat", "code" or "mixed" (their mean)."""
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    if task != "mixed":
        return dict(prior[task])
    common = set(prior["chat"]) & set(prior["code"])
    return {k: tuple((a + b) / 2 for a, b in zip(prior["chat"][k], prior["code"][k])) for k in sorted(common)}


def costs_of(latency: Costs | Callable[[float], float], host_s: float | None = None) -> Costs:
    """The Costs of a latency model: Costs as given, else a single-sequence latency model (q -> seconds) with the host
    work it carries (a LatencyProfile's measured host_s and loop_s; none for a plain callable); host_s overrides."""
    costs = latency if isinstance(latency, Costs) else \
        Costs.of_latency(latency, getattr(latency, "host_s", 0.0), getattr(latency, "loop_s", 0.0))
    return costs if host_s is None else replace(costs, host_s=host_s)


def predict(latency: Costs | Callable[[float], float], task: str = "mixed", host_s: float | None = None,
            prior: Mapping = PRIOR, rows: int = 1, handed_over: bool = False) -> list[Prediction]:
    """Predicted speedup (lade.pricing.speedup) of every prior config, fastest first: steps of `rows` rows each
    compressing and feeding as the prior says, against plain steps of lade's loop, or with handed_over against
    transformers' own loop. latency: Costs, or q -> seconds of one sequence's step (`costs_of`)."""
    costs = costs_of(latency, host_s)
    predictions = [
        Prediction(config, c, q, speedup(costs, Plan(rows, q, rows * c, s, handed_over=handed_over)))
        for config, (c, q, s) in prior_table(task, prior).items()
    ]
    return sorted(predictions, key=lambda p: -p.speedup)


def choose_config(latency: Costs | Callable[[float], float], task: str = "mixed", min_speedup: float = THRESHOLD,
                  host_s: float | None = None, prior: Mapping = PRIOR,
                  allowed: Callable[[LookaheadConfig], bool] | None = None, **config_fields) -> LookaheadConfig:
    """The predicted fastest config among those `allowed` (None: all), or LookaheadConfig(enabled=False) where none
    pays (lade.pricing.pays at `min_speedup`)."""
    for best in predict(latency, task, host_s, prior):
        if not pays(best.speedup, min_speedup):
            break
        config = LookaheadConfig.from_key(best.config, **config_fields)
        if allowed is None or allowed(config):
            return config
    return LookaheadConfig(enabled=False, **config_fields)
