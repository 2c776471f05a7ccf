"""Attention windows: layers that hide keys more than W positions behind a query (sliding-window cache layers,
GPT-Neo's local layers).

Below its window such a layer sees every key, exactly as full attention does, so lookahead decoding is exact as long
as no forward of the call holds W positions: the cache (at most max_length - 1 tokens) plus one step's tokens. Past
it a step's tokens, which share logical positions and sit later in the cache than their positions, would be hidden
from keys plain decoding shows them (GPT-Neo masks by index in the step), and a sliding cache layer would drop keys
a rejected draft still needs; lade refuses such a call before any forward.
"""

from __future__ import annotations

from transformers import GenerationConfig
from transformers.cache_utils import Cache, DynamicCache, DynamicSlidingWindowLayer

from .cache import self_attention_cache


def local_window(config) -> int | None:
    """A window a model applies inside its attention layers whatever the cache: GPT-Neo's "local" layers
    (config.attention_layers, config.window_size)."""
    if config.model_type == "gpt_neo" and "local" in (getattr(config, "attention_layers", None) or ()):
        return int(config.window_size)
    return None


def attention_window(model, cache: Cache) -> int | None:
    """The narrowest attention window of the model (its sliding cache layers and local layers), None for none."""
    windows = [layer.sliding_window for layer in getattr(self_attention_cache(cache), "layers", None) or ()
               if isinstance(layer, DynamicSlidingWindowLayer)]
    local = local_window(model.config.get_text_config(decoder=True))
    return min(windows + ([local] if local is not None else []), default=None)


def model_window(model) -> int | None:
    """The narrowest window of the cache generate builds for the model, less one (the positions a forward may hold
    and still see every key), None for none; a measurement of the model stays within it."""
    if model.config.is_encoder_decoder:
        return None
    window = attention_window(model, DynamicCache(config=model.config))
    return None if window is None else window - 1


def step_room(model, cache: Cache, gen: GenerationConfig) -> int | None:
    """The most tokens a step of this call may feed and stay below the model's attention window (None: no window);
    "auto" sizes its configuration within it."""
    window = attention_window(model, cache)
    return None if window is None or gen.max_length is None else window - gen.max_length


def check_window(model, cache: Cache, gen: GenerationConfig, step_tokens: int) -> None:
    """Refuse a call whose forwards can reach the model's attention window: the cache holds up to max_length - 1
    tokens when a step of up to `step_tokens` tokens is fed (step_tokens=1 before the configuration is known)."""
    room = step_room(model, cache, gen)
    if room is None or step_tokens <= room:
        return
    window = attention_window(model, cache)
    new = (gen.max_new_tokens or 0) + room - step_tokens  # most new tokens whose steps would stay below it
    step = f" plus a step of up to {step_tokens} tokens" if step_tokens > 1 else ""
    lower = f" to at most {new}" if gen.max_new_tokens and new > 0 and step_tokens > 1 else ""
    raise ValueError(
        f"model type '{model.config.model_type}' attends within a {window}-token window (sliding or local "
        f"attention), and this call reaches it: max_length {gen.max_length} (prompt + max_new_tokens){step}; "
        f"lookahead steps are exact only below the window: lower max_new_tokens{lower}, use a smaller "
        "lookahead_config, or decode with plain generate"
    )
