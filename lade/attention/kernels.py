"""Exact attention pieces for split attention: a fused kernel over the KV prefix (no mask) that also returns
the log-sum-exp of its scores, the small masked in-step block, and their log-sum-exp merge.

Shapes: query [B, H, q, D]; key, value [B, Hkv, k, D] with H a multiple of Hkv (grouped-query heads:
head h reads kv head h // (H / Hkv), as transformers' repeat_kv). Outputs [B, H, q, Dv], lse [B, H, q] fp32.
"""

from __future__ import annotations

import importlib.util

import torch

HALF = (torch.float16, torch.bfloat16)


def flash_attn_available() -> bool:
    """True when the flash-attn package (FlashAttention-2) is importable and CUDA is present."""
    return torch.cuda.is_available() and importlib.util.find_spec("flash_attn") is not None


def prefix_kernel(query: torch.Tensor) -> str:
    """Name of the fused kernel used for the unmasked prefix of this query's device, dtype and head size."""
    if query.device.type == "cpu":
        return "sdpa_flash_cpu"
    if query.device.type != "cuda":
        return "math"
    head_dim = query.shape[-1]
    if query.dtype in HALF and head_dim <= 256 and head_dim % 8 == 0:
        if flash_attn_available():
            return "flash_attn"
        if torch.cuda.get_device_capability(query.device) >= (8, 0):
            return "sdpa_flash_cuda"
    if head_dim % 8 == 0:
        return "sdpa_efficient_cuda"
    return "math"


def _group(query: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """[B, H, q, D] -> [B, Hkv, (H/Hkv)*q, D]: with no mask, a kv group's queries are just more rows."""
    b, h, q, d = query.shape
    return query.reshape(b, kv_heads, (h // kv_heads) * q, d)


def prefix_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float,
                     kernel: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Full (unmasked) attention of every query over key/value -> (output [B, H, q, Dv], lse [B, H, q] fp32)."""
    kernel = kernel or prefix_kernel(query)
    b, h, q, _ = query.shape
    if kernel == "flash_attn":
        from flash_attn import flash_attn_func  # handles grouped heads itself; layout [B, S, H, D]

        out, lse, _ = flash_attn_func(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                                      softmax_scale=scale, causal=False, return_attn_probs=True)
        return out.transpose(1, 2), lse[..., :q].float()
    grouped = _group(query, key.shape[1])  # [B, Hkv, r*q, D]
    if kernel == "sdpa_flash_cpu":
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(grouped, key, value, 0.0, False,
                                                                              scale=scale)
    elif kernel == "sdpa_flash_cuda":
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention(grouped, key, value, 0.0, False, False,
                                                                      scale=scale)[:2]
    elif kernel == "sdpa_efficient_cuda":
        out, lse = torch.ops.aten._scaled_dot_product_efficient_attention(grouped, key, value, None, True, 0.0,
                                                                          False, scale=scale)[:2]
    elif kernel == "math":
        scores = grouped.float() @ key.float().transpose(-1, -2) * scale  # [B, Hkv, r*q, k]
        lse = scores.logsumexp(-1)
        out = torch.softmax(scores, -1) @ value.float()
    else:
        raise ValueError(f"unknown prefix kernel {kernel!r}")
    rows = grouped.shape[2]
    return out.reshape(b, h, q, -1), lse[..., :rows].float().reshape(b, h, q)  # efficient pads lse rows


def block_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, visible: torch.Tensor,
                    scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of the step's queries over the step's own keys under `visible` [q, q] or [B, q, q] bool, in fp32.

    Every row must see at least one column (each step token sees itself), so every lse is finite.
    """
    b, h, q, d = query.shape
    kv_heads = key.shape[1]
    grouped = query.float().reshape(b, kv_heads, h // kv_heads, q, d)  # [B, Hkv, r, q, D]
    scores = grouped @ key.float().transpose(-1, -2).unsqueeze(2) * scale  # [B, Hkv, r, q, q]
    if visible.dim() == 3:
        visible = visible[:, None, None]  # [B, 1, 1, q, q]
    scores = scores.masked_fill(~visible, float("-inf"))
    lse = scores.logsumexp(-1)  # [B, Hkv, r, q]
    out = torch.softmax(scores, -1) @ value.float().unsqueeze(2)  # [B, Hkv, r, q, Dv]
    return out.reshape(b, h, q, -1), lse.reshape(b, h, q)


def merge(out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor) -> torch.Tensor:
    """Softmax over the union of two disjoint key sets from each part's normalised output and lse -> fp32."""
    lse = torch.logaddexp(lse_a, lse_b)  # [B, H, q]
    return out_a.float() * (lse_a - lse).exp().unsqueeze(-1) + out_b.float() * (lse_b - lse).exp().unsqueeze(-1)


def causal_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float) -> torch.Tensor:
    """Plain causal attention with no cache (a prefill) through a fused kernel -> [B, H, q, Dv]."""
    if prefix_kernel(query) == "flash_attn":
        from flash_attn import flash_attn_func

        out = flash_attn_func(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                              softmax_scale=scale, causal=True)
        return out.transpose(1, 2)
    return torch.nn.functional.scaled_dot_product_attention(
        query, key, value, is_causal=True, scale=scale, enable_gqa=query.shape[1] != key.shape[1])


def masked_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, visible: torch.Tensor,
                     scale: float) -> torch.Tensor:
    """One masked softmax over all keys: visible [B, q, k] bool (every row sees a key) -> [B, H, q, Dv]."""
    return torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=visible.unsqueeze(1), scale=scale, enable_gqa=query.shape[1] != key.shape[1])


def split_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, visible: torch.Tensor,
                    scale: float, kernel: str | None = None,
                    prefix_visible: torch.Tensor | None = None) -> torch.Tensor:
    """Attention of a step's q queries over [cache prefix | step block]: the prefix fully visible (through a fused
    kernel with no mask), the block under `visible` [q, q] or [B, q, q] -> [B, H, q, Dv] in the query's dtype.
    With `prefix_visible` [B, q, past] (left padding, batch rows holding fewer tokens) the prefix needs a mask, and
    the whole attention is one masked softmax instead."""
    q = query.shape[2]
    past = key.shape[2] - q
    if prefix_visible is not None and past > 0:
        block = visible.expand(query.shape[0], q, q)
        return masked_attention(query, key, value, torch.cat([prefix_visible, block], dim=-1), scale)
    out, lse = block_attention(query, key[:, :, past:], value[:, :, past:], visible, scale)
    if past > 0:
        out_p, lse_p = prefix_attention(query, key[:, :, :past], value[:, :, :past], scale, kernel)
        out = merge(out_p, lse_p, out, lse)
    return out.to(query.dtype)
