"""What lookahead generation returns: transformers' output types plus decoding statistics."""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from transformers.generation.utils import (
    GenerateBeamDecoderOnlyOutput,
    GenerateBeamEncoderDecoderOutput,
    GenerateDecoderOnlyOutput,
    GenerateEncoderDecoderOutput,
)

from .device import synchronize


@dataclass
class LookaheadStats:
    """accepted_per_step[i]: tokens emitted by forward pass i (the prefill counts as step 0); under beam search, the
    beam search steps forward i determined (tokens added to every beam)."""

    accepted_per_step: list[int] = field(default_factory=list)
    forward_time_s: float = 0.0
    total_time_s: float = 0.0
    last_forward_s: float = 0.0  # the latest forward's time
    tree_nodes: list[int] = field(default_factory=list)  # draft nodes each steady step fed (a row's stats)
    handed_over: bool = False  # "auto" ran the whole call through transformers' plain loop (lade/handover.py)

    @property
    def steps(self) -> int:
        return len(self.accepted_per_step)

    @property
    def new_tokens(self) -> int:
        return sum(self.accepted_per_step)

    @property
    def compression(self) -> float:
        """New tokens per forward pass (plain decoding: 1.0)."""
        return self.new_tokens / max(self.steps, 1)

    @property
    def last_accepted(self) -> int:
        return self.accepted_per_step[-1] if self.accepted_per_step else 0

    @property
    def host_share(self) -> float:
        """Share of decoding time spent outside the model forward."""
        return 1.0 - self.forward_time_s / self.total_time_s if self.total_time_s else 0.0

    def record_step(self, accepted: int) -> None:
        self.accepted_per_step.append(accepted)

    @contextmanager
    def timed_forward(self, device: torch.device):
        start = time.perf_counter()
        yield
        synchronize(device)
        self.last_forward_s = time.perf_counter() - start
        self.forward_time_s += self.last_forward_s

    def to_dict(self) -> dict:
        return {
            "steps": self.steps, "new_tokens": self.new_tokens, "compression": self.compression,
            "forward_time_s": self.forward_time_s, "total_time_s": self.total_time_s,
            "host_share": self.host_share, "accepted_per_step": list(self.accepted_per_step),
            "handed_over": self.handed_over,
        }


@dataclass
class LookaheadDecoderOnlyOutput(GenerateDecoderOnlyOutput):
    lookahead_stats: LookaheadStats | None = None
    row_stats: list[LookaheadStats] | None = None  # per row of a batch; lookahead_stats sums rows per forward


@dataclass
class LookaheadEncoderDecoderOutput(GenerateEncoderDecoderOutput):
    lookahead_stats: LookaheadStats | None = None
    row_stats: list[LookaheadStats] | None = None


@dataclass
class LookaheadBeamDecoderOnlyOutput(GenerateBeamDecoderOnlyOutput):
    lookahead_stats: LookaheadStats | None = None


@dataclass
class LookaheadBeamEncoderDecoderOutput(GenerateBeamEncoderDecoderOutput):
    lookahead_stats: LookaheadStats | None = None


def output_type(model, beams: bool = False) -> type:
    """The output class lade returns for the model (decoder-only or encoder-decoder), of beam search or not."""
    if beams:
        return LookaheadBeamEncoderDecoderOutput if model.config.is_encoder_decoder else LookaheadBeamDecoderOnlyOutput
    return LookaheadEncoderDecoderOutput if model.config.is_encoder_decoder else LookaheadDecoderOnlyOutput
