"""Lookahead parallelism on torch.distributed: every rank holds a model replica and computes a share of each
step's window columns and verification candidates (arXiv 2402.02057, section "lookahead parallelism").

Launch with `torchrun --nproc_per_node R script.py`; in the script call
`torch.distributed.init_process_group("gloo" | "nccl", timeout=...)`, then `lade.distributed.generate(...)`
on every rank with the same model, prompt and settings. Greedy, or sampling (lossless; rank 0 draws, and the
output equals single-process lade's with the same `LookaheadConfig(sampling_seed=...)`). One prompt at a time,
left padding allowed. Under NCCL, load the model on `cuda:LOCAL_RANK` in every rank.
"""

from __future__ import annotations

import functools

import torch
from transformers import GenerationConfig

from ..api import generate_with
from ..config import LookaheadConfig
from ..decoding import lookahead_generate
from .exchange import PeerFailure
from .strategy import ParallelStats, ParallelStrategy


def generate(model, input_ids: torch.LongTensor | None = None,
             lookahead_config: LookaheadConfig | dict | str | None = None, attention_mask: torch.Tensor | None = None,
             generation_config: GenerationConfig | None = None, return_stats: bool = False, **generation_kwargs):
    """`lade.generate`'s signature and outputs, decoded by all ranks of the default process group together;
    every rank returns the same sequence (with return_stats, its own ParallelStats)."""
    return generate_with(parallel_generate, model, input_ids, lookahead_config, attention_mask, generation_config,
                         return_stats, **generation_kwargs)


# transformers `custom_generate` callable of lookahead parallelism: lade's loop under ParallelStrategy
parallel_generate = functools.partial(lookahead_generate, lookahead_strategy=ParallelStrategy)


__all__ = ["ParallelStats", "ParallelStrategy", "PeerFailure", "generate", "parallel_generate"]
