"""Resolving `lookahead_config`: the one place where "auto" becomes a configuration, for every decoding mode."""

from __future__ import annotations

from transformers import GenerationConfig

from .config import LookaheadConfig
from .cost import MIN_SPEEDUP, TASKS, choose_config, latency_profile

AUTO_BUDGET = 24  # most draft nodes the adaptive planner considers per step


def auto_config(model, task: str = "mixed", min_speedup: float = MIN_SPEEDUP, refresh: bool = False,
                adaptive: bool = True, **config_fields) -> LookaheadConfig:
    """What lade runs for `lookahead_config="auto"` on this model and device. The model's latency profile is
    measured once (cached in the lade cache directory).

    adaptive (default): the merged drafter (retrieval, token recycling, and the Jacobi window where the device makes
    its extra tokens cheap) that decides each step how many tokens to feed, down to plain one-token steps, from the
    latency profile and its running acceptance statistics. The window (W, N) is the one the static choice below
    would run; none where it runs a pool-only or no lookahead config.
    adaptive=False: one fixed lookahead config predicted fastest from the measured compression prior, or a disabled
    config (plain decoding) when none gains `min_speedup` (lookahead parallelism uses this: its ranks must agree on
    every draft, so no drafter may learn from a rank's own logits).
    """
    static = choose_config(latency_profile(model, refresh=refresh), task, min_speedup, **config_fields)
    if not adaptive:
        return static
    window = static.window_size if static.enabled else 0
    return LookaheadConfig(draft="merged", adaptive=True, step_budget=AUTO_BUDGET, window_size=window,
                           ngram_size=static.ngram_size, guess_set_size=static.guess_set_size if window else 5,
                           **config_fields)


def resolve_config(value: LookaheadConfig | dict | str | None, generation_config: GenerationConfig, model,
                   adaptive: bool = True) -> LookaheadConfig:
    """A LookaheadConfig, a dict of its fields, "auto" or "auto:TASK" (TASK in lade.cost.TASKS), or None (then
    `generation_config.lookahead_config`, else the defaults). adaptive: see `auto_config`."""
    if value is None:
        value = getattr(generation_config, "lookahead_config", None)
    if value is None:
        return LookaheadConfig()
    if isinstance(value, LookaheadConfig):
        return value
    if isinstance(value, dict):
        return LookaheadConfig(**value)
    if isinstance(value, str) and value.partition(":")[0] == "auto":
        task = value.partition(":")[2] or "mixed"
        if task not in TASKS:
            raise ValueError(f"lookahead_config 'auto:{task}': the task must be one of {TASKS}")
        return auto_config(model, task, adaptive=adaptive)
    raise ValueError(f"lookahead_config must be a LookaheadConfig, a dict, 'auto' or 'auto:TASK', got {value!r}")
