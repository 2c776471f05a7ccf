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


def compact_rows(cache: Cache, past_length: int, starts: Sequence[int], keep: Sequence[Sequence[int]]) -> None:
    """Batched compaction: row b moves step-relative slots keep[b] to slots starts[b].., then the cache is
    cropped after the longest row. Slots of row b past starts[b] + len(keep[b]) are left as junk that the
    caller masks out (rows are never shifted, so each step copies only the accepted tokens)."""
    inner = self_attention_cache(cache)
    width = max(len(k) for k in keep)
    # padded entries re-copy slot `past_length` into row b's own junk tail; every dst stays < past + q
    src = torch.tensor([[past_length + k for k in ks] + [past_length] * (width - len(ks)) for ks in keep])  # [B, A]
    dst = torch.tensor([list(range(s, s + width)) for s in starts])  # [B, A]
    new_length = max(s + len(ks) for s, ks in zip(starts, keep))
    for layer in inner.layers:
        if not layer.is_initialized:
            continue
        for tensor in (layer.keys, layer.values):  # [B, H, past + q, D]
            shape = (-1, tensor.shape[1], -1, tensor.shape[-1])
            src_index = src.to(tensor.device)[:, None, :, None].expand(shape)  # [B, H, A, D]
            dst_index = dst.to(tensor.device)[:, None, :, None].expand(shape)  # [B, H, A, D]
            tensor.scatter_(2, dst_index, tensor.gather(2, src_index))
        extra = layer.keys.shape[-2] - new_length
        if extra:
            layer.crop(-extra)
