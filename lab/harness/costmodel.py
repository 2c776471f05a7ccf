"""Step latency of decoder-only transformers on GPU classes we cannot run here, and the speedup of lookahead decoding
(arXiv 2402.02057) it implies. The free parameters are fitted on published measurements in lab.studies.calibration.

One forward of q tokens over c cached tokens (fp16 weights) costs

    latency(q, c) = t_step + layers x t_layer + max(bytes(q, c) / (bandwidth x bandwidth_eff),
                                                     flops(q, c) / (peak x flop_eff x q / (q + q_half)))

- bytes: the matmul weights (read once per step), the KV cache (2 x layers x kv_heads x head_dim x c values) and,
  with eager attention, the score matrices (layers x heads x q x (c + q) values, written, masked, soft-maxed in
  fp32 and read again: SCORE_BYTES each; FlashAttention keeps them on chip);
- flops: 2 x matmul parameters x q (linear layers, the LM head included) plus 4 x layers x hidden x q x (c + q)
  (attention scores and values over every query head; grouped-query attention shrinks the KV cache, not these);
- t_step, t_layer: the fixed cost of an eager framework step (generation loop; per layer: kernel launches,
  Python), the same at any q;
- q / (q + q_half): GEMM efficiency grows with the rows fed (small q leaves tensor-core tiles idle) and reaches
  flop_eff only well past q_half; below the device's ridge the step is bandwidth-bound anyway.

speedup = compression x latency(1) / (mean step latency of the step mix + host_s), the mix priced by the core's
`lade.cost.step_latency` (a share of one-token steps, the rest of equal size); host_s is lookahead's own per-step
work outside the forward.

A batch of B rows, each feeding q tokens, reads the weights once but B KV caches and does B times the FLOPs (GEMM
efficiency then follows the B x q rows fed): plain batched decoding gains from B while lookahead's wider steps turn
compute-bound sooner. `batch_speedup` prices lookahead against plain decoding at the same B, by the batch's slowest
row (a static batch ends with it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache

import numpy as np
import pandas as pd

from lab.harness.paths import GPUS_CSV, published
from lade.cost import step_latency
from lade.handover import slowest_row

DTYPE_BYTES = 2  # fp16 / bf16 weights and KV cache
CONTEXT = 512  # cached tokens priced in GPU predictions (a typical prompt plus part of the answer)
SCORE_BYTES = 16  # memory traffic per attention score with eager attention (fp16 write, mask, fp32 softmax, read)


@dataclass(frozen=True)
class Shape:
    """A decoder-only transformer's shape (Llama family: gated MLP; untied LM head unless `tied_embeddings`)."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    head_dim: int = 0  # 0: hidden // heads
    tied_embeddings: bool = False  # the LM head reuses the input embedding

    @classmethod
    def from_config(cls, config: Mapping) -> Shape | None:
        """The shape of a transformers config.json (dict), None where it lacks the sizes."""
        hidden, layers, vocab = config.get("hidden_size"), config.get("num_hidden_layers"), config.get("vocab_size")
        if not (hidden and layers and vocab):
            return None
        heads = config.get("num_attention_heads") or 1
        return cls(layers, hidden, heads, config.get("num_key_value_heads") or heads,
                   config.get("intermediate_size") or 4 * hidden, vocab, config.get("head_dim") or 0,
                   bool(config.get("tie_word_embeddings", False)))

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * (self.head_dim or self.hidden // self.heads)

    @property
    def matmul_params(self) -> float:
        """Parameters used as matrix multiplications per token: attention, MLP and the LM head."""
        attention = 2 * self.hidden * self.hidden + 2 * self.hidden * self.kv_dim  # q, o; k, v
        return float(self.layers * (attention + 3 * self.hidden * self.ffn) + self.vocab * self.hidden)

    @property
    def params(self) -> float:
        """All parameters: matmuls, the input embedding (unless tied to the LM head) and the RMSNorm weights."""
        embedding = 0 if self.tied_embeddings else self.vocab * self.hidden
        return self.matmul_params + embedding + (2 * self.layers + 1) * self.hidden


@dataclass(frozen=True)
class Gpu:
    name: str
    peak_tflops: float  # dense fp16 tensor TFLOP/s (fp32 accumulate)
    bandwidth_gbs: float
    memory_gb: float


@dataclass(frozen=True)
class LatencyParams:
    """The model's free parameters (one set per GPU class; see lab.studies.calibration)."""

    t_step: float  # seconds per step
    t_layer: float  # seconds per layer per step
    bandwidth_eff: float  # achieved / peak memory bandwidth
    flop_eff: float  # achieved / peak FLOP/s at large q
    q_half: float  # tokens per step at which GEMMs reach half of flop_eff
    host_s: float  # lookahead's per-step host work, seconds
    eager_attention: bool = True  # score matrices go through memory (False: FlashAttention)


@cache
def shapes() -> dict[str, Shape]:
    """data/published/model_shapes.csv: model name -> Shape."""
    table = pd.read_csv(published("model_shapes"))
    return {r.model: Shape(int(r.layers), int(r.hidden), int(r.heads), int(r.kv_heads), int(r.ffn), int(r.vocab))
            for r in table.itertuples()}


def _lookup(known: dict, name: str, what: str, where: str):
    if name not in known:
        raise KeyError(f"unknown {what} {name!r}; {where} has {sorted(known)}")
    return known[name]


def shape(name: str) -> Shape:
    return _lookup(shapes(), name, "model shape", "data/published/model_shapes.csv")


@cache
def gpus() -> dict[str, Gpu]:
    """data/gpus.csv: GPU class -> Gpu (dense fp16 tensor peak with fp32 accumulate, bandwidth, memory)."""
    table = pd.read_csv(GPUS_CSV)
    return {r.gpu: Gpu(r.gpu, float(r.fp16_tensor_tflops_dense), float(r.memory_bandwidth_gbs), float(r.memory_gb))
            for r in table.itertuples()}


def gpu(name: str) -> Gpu:
    return _lookup(gpus(), name, "GPU class", "data/gpus.csv")


def step_bytes(s: Shape, q, context: float, eager_attention: bool = True, batch: int = 1):
    """Bytes a step of `batch` rows moves, each row feeding q tokens over `context` cached tokens: the weights once,
    each row's KV cache and (eager attention) score matrices."""
    q = np.asarray(q, dtype=float)
    scores = batch * s.layers * s.heads * q * (context + q) * SCORE_BYTES if eager_attention else 0.0
    return (s.matmul_params + batch * 2 * s.layers * s.kv_dim * context) * DTYPE_BYTES + scores


def step_flops(s: Shape, q, context: float, batch: int = 1):
    """FLOPs of a step of `batch` rows, each feeding q tokens over `context` cached tokens."""
    q = np.asarray(q, dtype=float)
    return batch * (2 * s.matmul_params * q + 4 * s.layers * s.hidden * q * (context + q))


def latency(s: Shape, g: Gpu, p: LatencyParams, q, context: float = CONTEXT, batch: int = 1):
    """Seconds of one forward of `batch` rows, each feeding q tokens (scalar or array) over `context` cached tokens.
    GEMM efficiency follows the rows the matmuls see, batch x q."""
    q = np.asarray(q, dtype=float)
    if np.any(q < 1) or batch < 1:
        raise ValueError(f"a step feeds at least one token to at least one row, got q={q}, batch={batch}")
    rows = batch * q
    memory = step_bytes(s, q, context, p.eager_attention, batch) / (g.bandwidth_gbs * 1e9 * p.bandwidth_eff)
    compute = step_flops(s, q, context, batch) / (g.peak_tflops * 1e12 * p.flop_eff * rows / (rows + p.q_half))
    return p.t_step + s.layers * p.t_layer + np.maximum(memory, compute)


def speedup(compression: float, lat, step_tokens: float, single_share: float, host_s: float) -> float:
    """compression x lat(1) / (mean latency of the step mix + host_s); `lat`: q -> seconds."""
    return compression * float(lat(1)) / (step_latency(lambda q: float(lat(q)), step_tokens, single_share) + host_s)


def batch_speedup(s: Shape, g: Gpu, p: LatencyParams, batch: int, compression: float, step_tokens: float,
                  single_share: float, context: float = CONTEXT) -> float:
    """Throughput of lookahead over plain batched decoding at `batch` rows of a static batch, which ends with its
    slowest row: `speedup` with that row's compression and share of one-token steps (lade.handover.slowest_row, from
    the config's mean row: compression, tokens per row and step, share of one-token steps), both steps priced at that
    batch, and the host work per step growing with the rows (host_s per row: drafting and verification run per row).
    At batch 1 this is `speedup` of the single-sequence latency."""
    lat = lambda q: latency(s, g, p, q, context, batch)  # noqa: E731
    slowest, single = slowest_row(compression, single_share, batch)
    return speedup(slowest, lat, step_tokens, single, batch * p.host_s)


def fits(s: Shape, g: Gpu, n_gpus: int = 1) -> bool:
    """Whether the fp16 weights fit in the memory of `n_gpus` GPUs (the KV cache and activations not counted)."""
    return s.params * DTYPE_BYTES / 1e9 < g.memory_gb * n_gpus
