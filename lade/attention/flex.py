"""FlexAttention pieces: a step's BlockMask and the kernel (compiled where it fuses, eager elsewhere)."""

from __future__ import annotations

from functools import cache

import torch
from torch.nn.attention.flex_attention import BlockMask, flex_attention

BLOCK = 128  # FlexAttention's default tile


@cache
def flex_kernel(device_type: str):
    """torch.compile'd flex_attention on CUDA (a fused kernel); on CPU the eager one: exact, but it
    materialises the scores (torch warns so once), and compiling it on CPU costs about a minute per shape."""
    return torch.compile(flex_attention, dynamic=True) if device_type == "cuda" else flex_attention


def tree_block_mask(visible: torch.Tensor, past: int, prefix: torch.Tensor | None = None) -> BlockMask:
    """BlockMask over [q, past + q] per row from the step block `visible` [B, q, q] bool and the cache visibility
    `prefix` [B, q, past] bool. Without `prefix` every query sees the whole cache (full tiles, no mask_mod call)."""
    batch, q = visible.shape[:2]
    kv = past + q
    if prefix is not None and past == 0:
        prefix = None
    q_tiles, kv_tiles = -(-q // BLOCK), -(-kv // BLOCK)
    full_tiles = past // BLOCK if prefix is None else 0
    order = torch.arange(kv_tiles, dtype=torch.int32, device=visible.device)  # [kv_tiles]
    partial = torch.cat([order[full_tiles:], order[:full_tiles]])  # the partial tiles first, then padding

    def tiles(first: torch.Tensor, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        num = torch.full((batch, 1, q_tiles), count, dtype=torch.int32, device=visible.device)  # [B, 1, q_tiles]
        return num, first.expand(batch, 1, q_tiles, kv_tiles)  # [B, 1, q_tiles, kv_tiles]

    def mask_mod(b, h, q_idx, kv_idx):  # indices clamped: fused kernels may evaluate padded tile positions
        row = q_idx.clamp(0, q - 1)
        in_step = visible[b, row, (kv_idx - past).clamp(0, q - 1)]
        if prefix is None:
            return (kv_idx < past) | in_step
        return torch.where(kv_idx < past, prefix[b, row, kv_idx.clamp(0, past - 1)], in_step)

    return BlockMask.from_kv_blocks(*tiles(partial, kv_tiles - full_tiles), *tiles(order, full_tiles),
                                    BLOCK_SIZE=BLOCK, mask_mod=mask_mod, seq_lengths=(q, kv),
                                    compute_q_blocks=False)
