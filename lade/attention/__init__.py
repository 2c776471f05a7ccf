"""Attention paths for lookahead steps: "mask", "split" (FlashAttention-compatible), "flex", "auto"."""

from .choice import MASK_ATTENTION, PATHS, AttentionPath, attention_path, choose_attention
from .kernels import prefix_kernel, split_attention

__all__ = ["MASK_ATTENTION", "PATHS", "AttentionPath", "attention_path", "choose_attention", "prefix_kernel",
           "split_attention"]
