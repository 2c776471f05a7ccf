"""lade's attention functions in transformers' AttentionInterface contract:
fn(module, query [B, H, q, D], key [B, Hkv, past+q, D], value, attention_mask, scaling=, dropout=, **kwargs)
-> (attn_output [B, q, H, Dv], attn_weights=None).

Both take a bool attention_mask: the in-step block [B, 1, q, q] when every query sees the whole cache prefix (the
first past = key length - q keys), or the full [B, 1, q, past + q] visibility (left padding, batch rows holding
fewer tokens); None means causal.
"lade_split": the prefix through a fused kernel, the block in plain torch, merged by log-sum-exp.
"lade_flex": one FlexAttention call with a BlockMask built from the block.
"lade_sdpa": transformers' sdpa attention, except that a masked call with grouped key/value heads on CPU reads the
heads in place (SDPA's enable_gqa) where transformers copies the whole cache per layer (repeat_kv); it takes the
same masks as "sdpa" (the "mask" path runs sdpa models under it).
Registered once on import (transformers' public extension point); lade.attention.choice selects them per forward.
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface

from ..compat import sdpa_attention
from .flex import flex_kernel, tree_block_mask
from .kernels import causal_attention, split_attention

SPLIT = "lade_split"
FLEX = "lade_flex"
SDPA = "lade_sdpa"
sdpa_attention_forward, ALL_MASK_ATTENTION_FUNCTIONS = sdpa_attention()


def _check_plain(name: str, dropout: float, kwargs: dict, keys: int) -> None:
    """Refuse attention variants these paths do not compute, instead of silently dropping them. A sliding window
    (query at position i sees keys at i - window < j <= i) wider than the forward's `keys` hides none of them, so
    it is computed exactly by ignoring it, as transformers' flash-attention integration does below the window
    (lade.windows refuses, before any forward, a call whose forwards would reach it)."""
    if dropout:
        raise ValueError(f"{name} computes inference attention only; put the model in eval() (dropout={dropout})")
    window = kwargs.get("sliding_window")
    if window is not None and keys > window:
        raise ValueError(
            f"{name} does not implement a sliding window narrower than its keys ({window} < {keys}); lookahead "
            "steps are exact only below the window: lower max_new_tokens or decode with plain generate"
        )
    for key in ("softcap", "s_aux", "position_bias"):
        if kwargs.get(key) is not None:
            raise ValueError(
                f"{name} does not implement `{key}` (set by this model's attention); use LookaheadConfig("
                "attention='mask') with attn_implementation='eager' or 'sdpa'"
            )


def split_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                            **kwargs) -> tuple[torch.Tensor, None]:
    _check_plain(SPLIT, dropout, kwargs, key.shape[2])
    q = query.shape[2]
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    if attention_mask is None and key.shape[2] == q:
        out = causal_attention(query, key, value, scale)  # [B, H, q, Dv]
    else:
        prefix, block = _visibility(SPLIT, attention_mask, query.shape[0], q, key.shape[2], query.device)
        out = split_attention(query, key, value, block, scale, prefix_visible=prefix)
    return out.transpose(1, 2).contiguous(), None


def _visibility(name: str, mask: torch.Tensor | None, batch: int, q: int, kv: int,
                device: torch.device) -> tuple[torch.Tensor | None, torch.Tensor]:
    """(prefix visibility [B, q, kv - q] or None when all of it is visible, in-step block [B, q, q]) from the bool
    mask handed to the model (None: causal block)."""
    if mask is None:
        return None, torch.ones(q, q, dtype=torch.bool, device=device).tril().expand(batch, q, q)
    shapes = {(b, 1, q, q) for b in (1, batch)} | {(b, 1, q, kv) for b in (1, batch)}
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or tuple(mask.shape) not in shapes:
        shape = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(
            f"attention '{name}' expects a bool [{batch}, 1, {q}, {q}] or [{batch}, 1, {q}, {kv}] mask, got {shape}; "
            "it is meant to be driven by lade (LookaheadConfig(attention='split' or 'flex'))"
        )
    mask = mask[:, 0].expand(batch, q, mask.shape[-1])  # [B, q, q or kv]
    if mask.shape[-1] == q:
        return None, mask
    return mask[..., : kv - q], mask[..., kv - q :]


def flex_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                           attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                           **kwargs) -> tuple[torch.Tensor, None]:
    _check_plain(FLEX, dropout, kwargs, key.shape[2])
    q, kv = query.shape[2], key.shape[2]
    prefix, block = _visibility(FLEX, attention_mask, query.shape[0], q, kv, query.device)
    block_mask = tree_block_mask(block, kv - q, prefix)
    out = flex_kernel(query.device.type)(query, key, value, block_mask=block_mask, scale=scaling,
                                         enable_gqa=query.shape[1] != key.shape[1])  # [B, H, q, Dv]
    return out.transpose(1, 2).contiguous(), None


def sdpa_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                 **kwargs) -> tuple[torch.Tensor, None]:
    """attention_mask: [B, 1, q, kv] (additive float or bool) or None, as for transformers' "sdpa"."""
    grouped_masked_cpu = (attention_mask is not None and query.shape[1] != key.shape[1] and query.device.type == "cpu"
                          and attention_mask.shape[-1] == key.shape[2])
    if not grouped_masked_cpu or dropout or any(kwargs.get(k) is not None for k in ("softcap", "s_aux",
                                                                                      "position_bias")):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    out = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, scale=scaling,
                                                           enable_gqa=True)  # [B, H, q, Dv]
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(SPLIT, split_attention_forward)
AttentionInterface.register(FLEX, flex_attention_forward)
AttentionInterface.register(SDPA, sdpa_forward)
ALL_MASK_ATTENTION_FUNCTIONS.register(SDPA, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])  # the masks "sdpa" gets
