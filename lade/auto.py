"""Resolving `lookahead_config`: the one place where "auto" becomes a configuration, for every decoding mode."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from transformers import GenerationConfig

from .config import AUTO_BUDGET, AUTO_DRAFT, LookaheadConfig
from .cost import TASKS, choose_config
from .drafters import registered
from .pricing import THRESHOLD
from .profile import device_costs


def auto_config(model, task: str = "mixed", min_speedup: float = THRESHOLD, refresh: bool = False,
                adaptive: bool = True, latency: Callable[[float], float] | None = None, draft: str = AUTO_DRAFT,
                allowed: Callable[[LookaheadConfig], bool] | None = None, context: float | None = None,
                **config_fields) -> LookaheadConfig:
    """What lade runs for `lookahead_config="auto"` on this model and device. latency: the latency model (q ->
    seconds of a q-token step, e.g. a lade.cost.LatencyProfile, with the host work it carries); None measures the
    model's profile once for every row count (cached in the lade cache directory, lade.profile), priced at `context`
    cached tokens (lade.profile.device_costs; None: the profile's own).

    adaptive (default): the adaptive drafter `draft` (any registered with adaptive=True; by default the merged one:
    retrieval, token recycling, and the Jacobi window where the device makes its extra tokens cheap) that decides
    each step how many tokens to feed, down to plain one-token steps, from the latency model and its running
    acceptance statistics. The window (W, N) is the one the static choice below would run; none where it runs a
    pool-only or no lookahead config (a drafter registered without a window gets none).
    adaptive=False: one fixed lookahead config predicted fastest from the measured compression prior, or a disabled
    config (plain decoding) when none pays (lade.pricing, at `min_speedup`); lookahead parallelism uses this: its
    ranks must agree on every draft, so no drafter may learn from a rank's own logits. allowed: which fixed configs
    may be chosen (e.g. those lookahead parallelism can shard); None: all.
    """
    if adaptive and not registered(draft).adaptive:
        raise ValueError(f"auto_config(draft={draft!r}): an adaptive auto config needs a drafter registered with "
                         "adaptive=True (it plans each step from the latency model)")
    profile = device_costs(model, latency, refresh, context)
    shared = {name: value for name, value in config_fields.items() if name != "draft_options"}
    static = choose_config(profile, task, min_speedup, allowed=allowed, **(shared if adaptive else config_fields))
    if not adaptive:
        return static
    window = static.window_size if static.enabled else 0
    try:
        return _adaptive(draft, window, static, config_fields)
    except ValueError:
        if not window:
            raise
        return _adaptive(draft, 0, static, config_fields)  # a drafter that drafts without a window


def _adaptive(draft: str, window: int, static: LookaheadConfig, config_fields: dict) -> LookaheadConfig:
    return LookaheadConfig(draft=draft, adaptive=True, step_budget=AUTO_BUDGET, window_size=window,
                           ngram_size=static.ngram_size, guess_set_size=static.guess_set_size if window else 5,
                           **config_fields)


def auto_task(value) -> str | None:
    """The task of a lookahead_config "auto" ("mixed") or "auto:TASK" (TASK in lade.cost.TASKS), None for any other
    value."""
    if not (isinstance(value, str) and value.partition(":")[0] == "auto"):
        return None
    task = value.partition(":")[2] or "mixed"
    if task not in TASKS:
        raise ValueError(f"lookahead_config 'auto:{task}': the task must be one of {TASKS}")
    return task


def fitted(config: LookaheadConfig, max_step_tokens: int | None) -> LookaheadConfig:
    """An "auto" config whose steps feed at most `max_step_tokens` tokens (None: any): an adaptive one without its
    window and with its tree budget cut to fit, else (or where not one draft node fits) plain decoding."""
    if max_step_tokens is None or not config.enabled or config.max_step_tokens() <= max_step_tokens:
        return config
    if config.adaptive and max_step_tokens >= 2:
        return replace(config, window_size=0, step_budget=min(config.step_budget, max_step_tokens - 1))
    return replace(config, enabled=False)


def resolve_config(value: LookaheadConfig | dict | str | None, generation_config: GenerationConfig, model,
                   adaptive: bool = True, latency: Callable[[float], float] | None = None,
                   allowed: Callable[[LookaheadConfig], bool] | None = None,
                   max_step_tokens: int | None = None, context: float | None = None) -> LookaheadConfig:
    """A LookaheadConfig, a dict of its fields, "auto" or "auto:TASK" (TASK in lade.cost.TASKS), or None (then
    `generation_config.lookahead_config`, else the defaults). adaptive, latency, allowed, context: see `auto_config`;
    max_step_tokens: the most tokens an "auto" step may feed (a model's attention window, lade.windows.step_room)."""
    if value is None:
        value = getattr(generation_config, "lookahead_config", None)
    if value is None:
        return LookaheadConfig()
    if isinstance(value, LookaheadConfig):
        return value
    if isinstance(value, dict):
        return LookaheadConfig(**value)
    task = auto_task(value)
    if task is not None:
        return fitted(auto_config(model, task, adaptive=adaptive, latency=latency, allowed=allowed, context=context),
                      max_step_tokens)
    raise ValueError(f"lookahead_config must be a LookaheadConfig, a dict, 'auto' or 'auto:TASK', got {value!r}")
