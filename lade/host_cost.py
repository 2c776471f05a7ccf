"""A step's host work, measured on the device a latency profile is measured on (lade.cost.measure_latency): what
lade.pricing weighs beside the forward.

- loop_s: lade's loop's work per row and step beyond transformers' plain loop: laying the row out (build_layout,
  stack_layouts), choosing its token from the step's logits, and cropping the step's KV again.
- host_s: a drafting row's work per step: the adaptive drafter "auto" runs planning a tree, sizing it and observing
  the step's logits, on the measurement's context.
Each is the median over the timed steps (a step's host work varies with what it plans; noise only adds).
"""

from __future__ import annotations

import statistics
import time

import torch

from .config import AUTO_BUDGET, AUTO_DRAFT, LookaheadConfig
from .drafters import Outcome, RowContext, make_drafter
from .tree import TokenTree

DRAFT_STEPS = 12  # drafting steps timed (after two untimed ones)


class HostTimer:
    """Collects the host seconds of lade's loop work around measured steps, per row."""

    def __init__(self) -> None:
        self.seconds: list[float] = []

    def add(self, seconds: float, rows: int) -> None:
        self.seconds.append(seconds / rows)

    def median(self) -> float:
        return statistics.median(self.seconds) if self.seconds else 0.0


@torch.inference_mode()
def drafting_seconds(prompt: torch.Tensor, vocab_size: int, steps: int = DRAFT_STEPS) -> float:
    """Median seconds of one row's drafting per step (offer, take every node, observe the step's logits) by the
    adaptive drafter "auto" runs, growing the row from `prompt` ([P] token ids, on the CPU)."""
    config = LookaheadConfig(draft=AUTO_DRAFT, adaptive=True, step_budget=AUTO_BUDGET, window_size=0)
    drafter = make_drafter(config, RowContext(prompt, None, vocab_size, lambda q: 1.0, 0.0))
    generator = torch.Generator().manual_seed(1)
    tokens, times = prompt.clone(), []
    for step in range(steps + 2):
        logits = torch.randn(1 + AUTO_BUDGET, vocab_size, generator=generator)  # [1 + nodes, V]
        start = time.perf_counter()
        offer = drafter.offer(tokens, 1)
        draft = offer.take(len(offer.values))
        fed = [int(tokens[-1]), *TokenTree(draft.candidates).tokens]
        accepted = [int(logits[0].argmax())]
        drafter.observe(Outcome(accepted, None, torch.tensor(fed), logits[: len(fed)], len(fed)) if
                        drafter.observes_logits else Outcome(accepted, None, fed=len(fed)))
        if step >= 2:
            times.append(time.perf_counter() - start)
        tokens = torch.cat([tokens, torch.tensor(accepted)])  # [P + step + 1]
    return statistics.median(times)
