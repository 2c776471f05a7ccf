"""KV-cache compaction: keep the accepted tokens of a step in contiguous slots, drop the rest; and slotted caches,
whose steps write their KV in place."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from transformers.cache_utils import (
    Cache,
    DynamicCache,
    DynamicIndexedLayer,
    DynamicLayer,
    DynamicSlidingWindowLayer,
    EncoderDecoderCache,
)
from transformers.generation import GenerationConfig

from .compat import passed_to_generate, replicated_layer_class, set_replicated_layer_class, swap_class


class UnsupportedCacheError(ValueError):
    pass


def new_cache(model) -> Cache:
    """The cache lade builds when generate handed none (e.g. use_cache=False)."""
    if model.config.is_encoder_decoder:
        return EncoderDecoderCache(DynamicCache(config=model.config), DynamicCache(config=model.config))
    return DynamicCache(config=model.config)


def self_attention_cache(cache: Cache) -> DynamicCache:
    """The cache whose length grows with decoding (the decoder self-attention part of an encoder-decoder cache)."""
    return cache.self_attention_cache if isinstance(cache, EncoderDecoderCache) else cache


def check_compactable(cache: Cache, model_type: str) -> None:
    """Raise a clear error for caches whose entries cannot be moved (static, indexed, linear, quantized); sliding-window
    layers are refused only where a call reaches their window (lade.windows)."""
    inner = self_attention_cache(cache)
    layers = getattr(inner, "layers", None)
    if not isinstance(inner, DynamicCache) or layers is None:
        raise UnsupportedCacheError(
            f"lade needs a DynamicCache for model type '{model_type}', got {type(inner).__name__}; "
            "do not pass cache_implementation= or a static cache to lookahead generation"
        )
    for layer in layers:
        if type(layer) is DynamicSlidingWindowLayer:
            continue  # exact below its window, which lade.windows.check_window keeps every call under
        if type(layer) is DynamicIndexedLayer:
            raise UnsupportedCacheError(
                f"model type '{model_type}' keeps an indexer key cache for its sparse attention "
                f"({type(layer).__name__}: DeepSeek-V3.2, GLM-MoE-DSA), whose top-k key selection "
                "lade's tree steps and cache compaction do not follow; decode this model with plain generate"
            )
        if type(layer) is not DynamicLayer:
            raise UnsupportedCacheError(
                f"model type '{model_type}' uses {type(layer).__name__} cache layers (linear-attention or quantized "
                "states, which cannot drop a step's rejected drafts); lade compacts DynamicLayer caches only: decode "
                "this model with plain generate (or without cache quantization)"
            )


def compact(cache: Cache, past_length: int, starts: Sequence[int], keep: Sequence[Sequence[int]]) -> None:
    """After a step appended its q slots to every row at past_length..: row b moves step-relative slots keep[b]
    (ascending) to slots starts[b].., then the cache is cropped after the longest row. A batch row's slots past
    starts[b] + len(keep[b]) are left as junk that the caller masks out (rows are never shifted, so each step copies
    only the accepted tokens). One row (starts[0] == past_length) moves only what is out of place; a batch whose
    rows' tokens are all in place (each row at past_length, keeping a prefix of its slots) moves nothing."""
    inner = self_attention_cache(cache)
    new_length = max(s + len(ks) for s, ks in zip(starts, keep))
    if len(keep) == 1:
        src, dst = [past_length + k for k in keep[0]], list(range(starts[0], new_length))
        moves = [(layer.keys, layer.values) for layer in inner.layers if layer.is_initialized] if src != dst else []
        for tensors in moves:
            index = torch.tensor(src, device=tensors[0].device)
            for tensor in tensors:  # [1, H, past + q, D]
                tensor[..., dst[0] : dst[-1] + 1, :] = tensor.index_select(-2, index)
    elif any(start + i != past_length + k for start, ks in zip(starts, keep) for i, k in enumerate(ks)):
        width = max(len(k) for k in keep)
        # padded entries re-copy slot `past_length` into row b's own junk tail; every dst stays < past + q
        src = torch.tensor([[past_length + k for k in ks] + [past_length] * (width - len(ks)) for ks in keep])  # [B, A]
        dst = torch.tensor([list(range(s, s + width)) for s in starts])  # [B, A]
        on_device: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}  # (src, dst) [B, 1, A, 1] per device
        for layer in inner.layers:
            if not layer.is_initialized:
                continue
            for tensor in (layer.keys, layer.values):  # [B, H, past + q, D]
                if tensor.device not in on_device:
                    on_device[tensor.device] = tuple(t.to(tensor.device)[:, None, :, None] for t in (src, dst))
                src_index, dst_index = (t.expand(-1, tensor.shape[1], -1, tensor.shape[-1])  # [B, H, A, D]
                                        for t in on_device[tensor.device])
                tensor.scatter_(2, dst_index, tensor.gather(2, src_index))
    crop(cache, new_length)


def reorder_rows(cache: Cache, origin: Sequence[int], start: int = 0, cross: bool = True) -> None:
    """Beam search's reorder, in place: row r becomes row origin[r] of the decoder self-attention cache from slot
    `start` on (the slots before are equal in a row and its origin: a shared prompt), and of an encoder-decoder
    cache's cross-attention part unless `cross` is False (its rows equal their origins'). Only the rows that change
    are copied; transformers' reorder_cache copies every row's every slot."""
    moved = [r for r, o in enumerate(origin) if o != r]
    if not moved:
        return
    caches = [self_attention_cache(cache)]
    if cross and isinstance(cache, EncoderDecoderCache):
        caches.append(cache.cross_attention_cache)
    index: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}  # (dst, src) rows [M] per device
    for inner, first in zip(caches, (start, 0)):
        for layer in inner.layers:
            if not layer.is_initialized:
                continue
            for tensor in (layer.keys, layer.values):  # [N, H, S, D]
                if tensor.device not in index:
                    index[tensor.device] = (torch.tensor(moved, device=tensor.device),
                                            torch.tensor([origin[r] for r in moved], device=tensor.device))
                dst, src = index[tensor.device]
                tail = tensor[:, :, first:]  # [N, H, S - first, D], a view
                tail[dst] = tail[src]  # the sources are read (copied) before any row is written


def crop(cache: Cache, length: int) -> None:
    """Drop every slot from `length` on (no-op where the cache is not longer)."""
    for layer in self_attention_cache(cache).layers:
        if layer.is_initialized and layer.keys.shape[-2] > length:
            layer.crop(length - layer.keys.shape[-2])


SPARE = 256  # slots a new buffer holds past what it needs (at least; a quarter of the length for long ones)


class SlotLayer(DynamicLayer):
    """A DynamicLayer whose keys and values are prefix views of buffers with room to spare: a step writes its slots in
    place, where DynamicLayer concatenates (a copy of the layer's whole cache at every step). Cropping keeps the view
    on its buffer, so a step's slots past the kept ones are simply overwritten by the next step; any operation that
    replaces the tensors (a batch row leaving, a reorder) is followed by one copy into a new buffer."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """key_states, value_states: [B, H, q, D] the step's slots -> the layer's keys and values [B, H, S + q, D]."""
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        length = self.get_seq_length()
        end = length + key_states.shape[-2]
        if not self._in_buffer(key_states, end):
            self._rebuffer(key_states, value_states, length, end + max(SPARE, end // 4))
        self._key_buffer[..., length:end, :] = key_states
        self._value_buffer[..., length:end, :] = value_states
        self.keys, self.values = self._key_buffer[..., :end, :], self._value_buffer[..., :end, :]
        return self.keys, self.values

    def _in_buffer(self, key_states: torch.Tensor, end: int) -> bool:
        """Whether keys and values are still prefix views of this layer's buffers and `end` slots fit them."""
        buffers = getattr(self, "_key_buffer", None), getattr(self, "_value_buffer", None)
        if buffers[0] is None or end > buffers[0].shape[-2] or buffers[0].shape[:2] != key_states.shape[:2] \
                or buffers[0].dtype != key_states.dtype or buffers[0].device != key_states.device:
            return False
        return all(held.numel() == 0 or (held.data_ptr() == buffer.data_ptr() and held.stride() == buffer.stride())
                   for held, buffer in zip((self.keys, self.values), buffers))

    def _rebuffer(self, key_states: torch.Tensor, value_states: torch.Tensor, length: int, capacity: int) -> None:
        """New buffers of `capacity` slots holding the layer's first `length` slots."""
        for name, held, new in (("_key_buffer", self.keys, key_states), ("_value_buffer", self.values, value_states)):
            buffer = new.new_empty((*new.shape[:2], capacity, new.shape[-1]))  # [B, H, capacity, D]
            if length:
                buffer[..., :length, :] = held
            setattr(self, name, buffer)

    def release(self, compact: bool = True) -> None:
        """Back to a plain DynamicLayer; with `compact`, holding its own compact tensors (the spare room freed), else
        its views, which keep the buffers alive as long as the cache is."""
        if compact and self.is_initialized and self.keys.numel():
            self.keys, self.values = self.keys.clone(), self.values.clone()
        for name in ("_key_buffer", "_value_buffer"):
            self.__dict__.pop(name, None)
        swap_class(self, DynamicLayer)


def outlives_call(cache: Cache, gen: GenerationConfig, from_generate: bool) -> bool:
    """Whether the cache of a generate call outlives it, as transformers decides (`_sample`, checked against 5.20.0
    and 5.24.0): the output returns it (return_dict_in_generate), or the caller passed it in (outside generate, any
    cache was the caller's)."""
    return bool(gen.return_dict_in_generate) or not from_generate or passed_to_generate(cache)


@contextmanager
def slotted(cache: Cache, compact: bool = True) -> Iterator[None]:
    """Within the block, the decoder self-attention cache's layers (plain DynamicLayers, check_compactable) write
    each step's KV in place (SlotLayer); after it they are plain DynamicLayers again, holding their own compact
    tensors with `compact` (a cache that outlives the call, outlives_call), else views of the buffers."""
    inner = self_attention_cache(cache)
    for layer in inner.layers:
        if type(layer) is DynamicLayer:
            swap_class(layer, SlotLayer)  # same object and state: only update changes
    lazy = replicated_layer_class(inner) is DynamicLayer  # a cache that adds layers as it goes
    if lazy:
        set_replicated_layer_class(inner, SlotLayer)
    try:
        yield
    finally:
        if lazy:
            set_replicated_layer_class(inner, DynamicLayer)
        for layer in inner.layers:
            if isinstance(layer, SlotLayer):
                layer.release(compact)
