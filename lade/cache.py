"""KV-cache compaction: keep the accepted tokens of a step in contiguous slots, drop the rest."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer, EncoderDecoderCache


class UnsupportedCacheError(ValueError):
    pass


def self_attention_cache(cache: Cache) -> DynamicCache:
    """The cache whose length grows with decoding (the decoder self-attention part of an encoder-decoder cache)."""
    return cache.self_attention_cache if isinstance(cache, EncoderDecoderCache) else cache


def check_compactable(cache: Cache, model_type: str) -> None:
    """Raise a clear error for caches whose entries cannot be moved (static, sliding-window, linear, quantized)."""
    inner = self_attention_cache(cache)
    layers = getattr(inner, "layers", None)
    if not isinstance(inner, DynamicCache) or layers is None:
        raise UnsupportedCacheError(
            f"lade needs a DynamicCache for model type '{model_type}', got {type(inner).__name__}; "
            "do not pass cache_implementation= or a static cache to lookahead generation"
        )
    for layer in layers:
        if type(layer) is not DynamicLayer:
            raise UnsupportedCacheError(
                f"model type '{model_type}' uses {type(layer).__name__} cache layers (sliding-window, linear or "
                "quantized attention); lade can only compact full-attention DynamicLayer caches. Disable the "
                "sliding window (e.g. config.sliding_window=None) or decode this model without lookahead"
            )


def compact(cache: Cache, past_length: int, keep: Sequence[int]) -> None:
    """Move step-relative rows `keep` (ascending) to slots past_length.., then crop after them."""
    inner = self_attention_cache(cache)
    src = [past_length + k for k in keep]
    dst = list(range(past_length, past_length + len(keep)))
    for layer in inner.layers:
        if not layer.is_initialized:
            continue
        if src != dst:
            index = torch.tensor(src, device=layer.keys.device)
            layer.keys[..., dst[0] : dst[-1] + 1, :] = layer.keys.index_select(-2, index)
            layer.values[..., dst[0] : dst[-1] + 1, :] = layer.values.index_select(-2, index)
        extra = layer.keys.shape[-2] - (past_length + len(keep))
        if extra:
            layer.crop(-extra)
