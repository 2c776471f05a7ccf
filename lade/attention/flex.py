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


def tree_block_mask(visible: torch.Tensor, past: int) -> BlockMask:
    """BlockMask over [q, past + q] from the step block `visible` [q, q] bool: every query sees the whole
    cache prefix (full tiles, no mask_mod call) and the step's own keys per `visible` (partial tiles)."""
    q = visible.shape[0]
    kv = past + q
    q_tiles, kv_tiles, full_tiles = -(-q // BLOCK), -(-kv // BLOCK), past // BLOCK
    order = torch.arange(kv_tiles, dtype=torch.int32, device=visible.device)  # [kv_tiles]
    partial = torch.cat([order[full_tiles:], order[:full_tiles]])  # the partial tiles first, then padding

    def tiles(first: torch.Tensor, count: int) -> tuple[torch.Tensor, torch.Tensor]:
        num = torch.full((1, 1, q_tiles), count, dtype=torch.int32, device=visible.device)  # [1, 1, q_tiles]
        return num, first.expand(1, 1, q_tiles, kv_tiles)  # [1, 1, q_tiles, kv_tiles]

    def mask_mod(b, h, q_idx, kv_idx):  # indices clamped: fused kernels may evaluate padded tile positions
        step_col = (kv_idx - past).clamp(0, q - 1)
        return (kv_idx < past) | visible[q_idx.clamp(0, q - 1), step_col]

    return BlockMask.from_kv_blocks(*tiles(partial, kv_tiles - full_tiles), *tiles(order, full_tiles),
                                    BLOCK_SIZE=BLOCK, mask_mod=mask_mod, seq_lengths=(q, kv),
                                    compute_q_blocks=False)
