"""Attention paths: how one lookahead forward computes its tree attention, chosen per model and device.

"mask":  the 4-D additive mask [B, 1, q, past+q] through the model's own eager/sdpa attention (sdpa models run
         under lade_sdpa: the same, with grouped key/value heads read in place under a mask on CPU).
"split": lade_split: the cache prefix through a fused kernel, the in-step block under the tree mask, merged by
         log-sum-exp. The model gets the block [B, 1, q, q] as its mask when every row sees the whole cache, else
         the full [B, 1, q, past+q] bool mask (left padding, rows of a batch that hold fewer tokens).
"flex":  lade_flex: FlexAttention with a BlockMask over [q, past+q], built from the same bool mask.
"auto":  split for flash-attention models (their kernels take no tree mask), flex for flex_attention models on
         CUDA, mask for eager/sdpa models, split for any other implementation.

How a path reaches the model's attention layers: each layer calls ALL_ATTENTION_FUNCTIONS[config._attn_implementation]
(and masking_utils reads the same name), so for the duration of lade's own forward the model's configs read lade's
registered implementation, in this thread only (lade.scoped: a context variable, never an assignment on the shared
config). Another thread running the same model meanwhile, with plain generate or another lade call, reads its own
implementation; nothing is left on the model.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import torch
from transformers import PreTrainedModel

from ..compat import (
    ATTN_IMPLEMENTATION,
    attn_implementation,
    own_attn_implementation,
    routes_attention_through_interface,
)
from ..layout import BatchLayout, additive_mask, step_visibility
from ..scoped import overriding
from .interface import FLEX, SDPA, SPLIT

MASK_ATTENTION = ("eager", "sdpa")


class AttentionPath:
    """The mask handed to the model for the prefill and for a step, under the model's own implementation (sdpa:
    lade_sdpa, its grouped-head variant, read by the model during lade's forwards where the model lets it be set)."""

    name = "mask"
    implementation: str | None = None  # the implementation the model reads in lade's forwards (None: its own)

    def __init__(self, model: PreTrainedModel) -> None:
        implementation = attn_implementation(model.config) or "eager"
        if implementation not in MASK_ATTENTION:
            raise ValueError(
                f"attention='mask' needs attn_implementation in {MASK_ATTENTION}, but the model uses "
                f"'{implementation}', which cannot take lade's 4-D tree mask; use LookaheadConfig(attention='auto') "
                "or 'split'"
            )
        self._configs = _attention_configs(model)
        if implementation == "sdpa" and _switchable(model) and all(
                own_attn_implementation(config) in (None, "sdpa") for config in self._configs):
            self.implementation = SDPA

    def active(self) -> AbstractContextManager:
        """For one forward of lade's, in this thread: every attention config of the model reads the path's
        implementation."""
        if self.implementation is None:
            return nullcontext()
        return overriding([(config, ATTN_IMPLEMENTATION, self.implementation) for config in self._configs])

    def step_mask(self, batch: BatchLayout, past: int, cache_visible: torch.Tensor | None,
                  dtype: torch.dtype) -> torch.Tensor:
        """cache_visible: [B, past] bool, or None when every row sees the whole cache -> [B, 1, Q, past + Q] additive
        float mask (0 = attend, dtype min = blocked)."""
        return additive_mask(batch, past, cache_visible, dtype)

    def prefill_mask(self, attention_mask: torch.Tensor | None) -> torch.Tensor | None:
        """The mask for a prefill of left-padded prompts: the 2-D padding mask the model expands itself."""
        return attention_mask


def _switchable(model: PreTrainedModel) -> bool:
    """Whether every attention layer of the model goes through transformers' AttentionInterface."""
    return all(routes_attention_through_interface(type(module)) for module in model.modules()
               if isinstance(module, PreTrainedModel))


class _SwitchedPath(AttentionPath):
    """A path run under one of lade's registered attention functions, which the model reads during lade's forwards
    only. The model gets a bool mask: the step's [B, 1, q, q] block where the whole cache is visible, else
    [B, 1, q, past + q] (the prefill: None, i.e. causal, without padding)."""

    def __init__(self, model: PreTrainedModel) -> None:
        if not _switchable(model):
            blocking = next(type(module).__name__ for module in model.modules()
                            if isinstance(module, PreTrainedModel)
                            and not routes_attention_through_interface(type(module)))
            raise ValueError(
                f"{blocking} does not route attention through transformers' AttentionInterface, so "
                f"attention='{self.name}' cannot reach it; use LookaheadConfig(attention='mask') with "
                "attn_implementation='eager' or 'sdpa'"
            )
        self._configs = _attention_configs(model)

    def step_mask(self, batch: BatchLayout, past: int, cache_visible: torch.Tensor | None,
                  dtype: torch.dtype) -> torch.Tensor:
        if cache_visible is None:
            return batch.visible.unsqueeze(1)  # [B, 1, Q, Q] bool: the in-step block only
        return step_visibility(batch, cache_visible).unsqueeze(1)  # [B, 1, Q, past + Q] bool

    def prefill_mask(self, attention_mask: torch.Tensor | None) -> torch.Tensor | None:
        """None (causal) without padding, else [B, 1, P, P] bool: causal over real tokens (a padding slot sees
        itself)."""
        if attention_mask is None:
            return None
        p = attention_mask.shape[1]
        causal = torch.ones(p, p, dtype=torch.bool, device=attention_mask.device).tril()  # [P, P]
        allowed = causal & attention_mask.bool()[:, None, :]  # [B, P, P]
        return (allowed | torch.eye(p, dtype=torch.bool, device=attention_mask.device)).unsqueeze(1)


class SplitPath(_SwitchedPath):
    name, implementation = "split", SPLIT


class FlexPath(_SwitchedPath):
    name, implementation = "flex", FLEX


PATHS = {"mask": AttentionPath, "split": SplitPath, "flex": FlexPath}


def choose_attention(name: str, model: PreTrainedModel) -> str:
    """The concrete path for LookaheadConfig.attention (resolves "auto" from the model and its device)."""
    if name != "auto":
        return name
    implementation = attn_implementation(model.config) or "eager"
    if implementation in MASK_ATTENTION:
        return "mask"
    if implementation == "flex_attention" and model.device.type == "cuda":
        return "flex"
    return "split"


def attention_path(name: str, model: PreTrainedModel) -> AttentionPath:
    return PATHS[choose_attention(name, model)](model)


def _attention_configs(model: PreTrainedModel) -> list:
    """Every config (with its sub-configs) whose _attn_implementation an attention layer of the model reads."""
    found: dict[int, object] = {}
    pending = [module.config for module in model.modules() if isinstance(module, PreTrainedModel)]
    while pending:
        config = pending.pop()
        if id(config) not in found:
            found[id(config)] = config
            pending += [getattr(config, key) for key in config.sub_configs if getattr(config, key, None) is not None]
    return list(found.values())
