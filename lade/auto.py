"""Resolving `lookahead_config`: the one place where "auto" becomes a configuration, for every decoding mode."""

from __future__ import annotations

from transformers import GenerationConfig

from .config import LookaheadConfig
from .cost import MIN_SPEEDUP, TASKS, choose_config, latency_profile


def auto_config(model, task: str = "mixed", min_speedup: float = MIN_SPEEDUP, refresh: bool = False,
                **config_fields) -> LookaheadConfig:
    """The (N, W, G) predicted fastest for `model` on its device, or a disabled config (plain decoding) when none
    is predicted to gain `min_speedup`: the model's latency profile is measured once (cached in the lade cache
    directory) and combined with the measured compression prior (lade.cost)."""
    return choose_config(latency_profile(model, refresh=refresh), task, min_speedup, **config_fields)


def resolve_config(value: LookaheadConfig | dict | str | None, generation_config: GenerationConfig,
                   model) -> LookaheadConfig:
    """A LookaheadConfig, a dict of its fields, "auto" or "auto:TASK" (TASK in lade.cost.TASKS), or None (then
    `generation_config.lookahead_config`, else the defaults)."""
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
        return auto_config(model, task)
    raise ValueError(f"lookahead_config must be a LookaheadConfig, a dict, 'auto' or 'auto:TASK', got {value!r}")
