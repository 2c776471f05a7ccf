"""lade's attention functions in transformers' AttentionInterface contract:
fn(module, query [B, H, q, D], key [B, Hkv, past+q, D], value, attention_mask, scaling=, dropout=, **kwargs)
-> (attn_output [B, q, H, Dv], attn_weights=None).

Both take the step's in-step visibility as attention_mask, a small bool [1, 1, q, q] block (None: causal); the
cache prefix (the first past = key length - q keys) is visible to every query and needs no mask.
"lade_split": the prefix through a fused kernel, the block in plain torch, merged by log-sum-exp.
"lade_flex": one FlexAttention call with a BlockMask built from the block.
Registered once on import (transformers' public extension point; nothing is patched).
"""

from __future__ import annotations

import torch
from transformers import AttentionInterface

from .flex import flex_kernel, tree_block_mask
from .kernels import causal_attention, split_attention

SPLIT = "lade_split"
FLEX = "lade_flex"


def _check_plain(name: str, dropout: float, kwargs: dict) -> None:
    """Refuse attention variants these paths do not compute, instead of silently dropping them."""
    if dropout:
        raise ValueError(f"{name} computes inference attention only; put the model in eval() (dropout={dropout})")
    for key in ("softcap", "sliding_window", "s_aux", "position_bias"):
        if kwargs.get(key) is not None:
            raise ValueError(
                f"{name} does not implement `{key}` (set by this model's attention); use LookaheadConfig("
                "attention='mask') with attn_implementation='eager' or 'sdpa'"
            )


def split_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                            attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                            **kwargs) -> tuple[torch.Tensor, None]:
    _check_plain(SPLIT, dropout, kwargs)
    q = query.shape[2]
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    if attention_mask is None and key.shape[2] == q:
        out = causal_attention(query, key, value, scale)  # [B, H, q, Dv]
    else:
        out = split_attention(query, key, value, _visible_block(SPLIT, attention_mask, q, query.device), scale)
    return out.transpose(1, 2).contiguous(), None


def _visible_block(name: str, mask: torch.Tensor | None, q: int, device: torch.device) -> torch.Tensor:
    """The step block's [q, q] bool visibility from the mask handed to the model (None: causal)."""
    if mask is None:
        return torch.ones(q, q, dtype=torch.bool, device=device).tril()
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or tuple(mask.shape) != (1, 1, q, q):
        shape = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(
            f"attention '{name}' expects the in-step block as a bool [1, 1, {q}, {q}] mask, got {shape}; "
            "it is meant to be driven by lade (LookaheadConfig(attention='split' or 'flex'))"
        )
    return mask[0, 0]


def flex_attention_forward(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                           attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                           **kwargs) -> tuple[torch.Tensor, None]:
    _check_plain(FLEX, dropout, kwargs)
    q = query.shape[2]
    block_mask = tree_block_mask(_visible_block(FLEX, attention_mask, q, query.device), key.shape[2] - q)
    out = flex_kernel(query.device.type)(query, key, value, block_mask=block_mask, scale=scaling,
                                         enable_gqa=query.shape[1] != key.shape[1])  # [B, H, q, Dv]
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(SPLIT, split_attention_forward)
AttentionInterface.register(FLEX, flex_attention_forward)
