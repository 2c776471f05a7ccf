"""The planning drafter: retrieval, token recycling and the Jacobi window's n-grams merged into one candidate tree
per step, planned by estimated acceptance (planner.py), alone or together (LookaheadConfig.draft), with a fixed
budget of nodes or cut where the expected tokens per second peak (LookaheadConfig.adaptive)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch

from .acceptance import AcceptanceStats
from .acceptance_prior import PRIOR
from .base import Draft, Outcome
from .planner import Kind, Lead, Plan, plan_tree
from .pool import NGramPool
from .recycling import AdjacencyTable
from .retrieval import SuffixIndex
from .window import LookaheadWindow

if TYPE_CHECKING:
    from ..config import LookaheadConfig

RETRIEVALS = 4  # distinct retrieved continuations per source and step
MARGIN = 1.05  # predicted gain an adaptive step needs over a plain one-token step (estimates are noisy)
MATCH_BUCKETS = (1, 2, 4, 8, 16)  # a match of length m falls in the first bucket >= m (longer: the last + 1)


def match_bucket(length: int) -> int:
    return next((i for i, top in enumerate(MATCH_BUCKETS) if length <= top), len(MATCH_BUCKETS))


def retrieval_kind(match: int, depth: int) -> Kind:
    """A retrieved token `depth` tokens into a continuation whose match had length `match`: once its parent is
    accepted, the copy has matched match + depth tokens."""
    return ("retrieval", match_bucket(match + depth), min(depth, 1))


def recycling_kind(rank: int, depth: int) -> Kind:
    return ("recycling", rank, min(depth, 2))


def pool_kind(depth: int) -> Kind:
    return ("pool", min(depth, 2))


def kind_group(kind: Kind) -> Kind:
    """The drafter and depth bucket of a kind (every kind ends with its depth bucket)."""
    return kind[0], kind[-1]


def prior_rates() -> dict[Kind, float]:
    """Acceptance rates standing in until a sequence has its own counts (measured: see acceptance_prior.py)."""
    return {kind: rate for kind, (rate, _) in PRIOR.items()}


class StepCost:
    """Expected seconds of a step feeding `m` draft nodes (besides the last token and the window): the device's
    measured latency profile, corrected by the steps this sequence ran (the profile was timed at one context length
    and one machine state). Per size class of step (q in [2^k, 2^(k+1))) it keeps a running log-ratio of observed
    to profiled time; a class not yet observed borrows the nearest observed one's."""

    def __init__(self, latency: Callable[[float], float], window_tokens: int, host_s: float,
                 alpha: float = 0.2) -> None:
        self.latency, self.window, self.host_s, self.alpha = latency, window_tokens, host_s, alpha
        self.log_ratio: dict[int, float] = {}

    def _correction(self, q: int) -> float:
        if not self.log_ratio:
            return 1.0
        size = q.bit_length()
        return math.exp(self.log_ratio[min(self.log_ratio, key=lambda k: (abs(k - size), k))])

    def __call__(self, m: int) -> float:
        q = 1 + self.window + m
        return self.latency(q) * self._correction(q) + (self.host_s if m else 0.0)

    def observe(self, q: int, seconds: float) -> None:
        size, value = q.bit_length(), math.log(max(seconds, 1e-9) / self.latency(q))
        old = self.log_ratio.get(size)
        self.log_ratio[size] = value if old is None else (1 - self.alpha) * old + self.alpha * value


class PlanningDrafter:
    def __init__(self, config: LookaheadConfig, prompt: torch.Tensor, source: torch.Tensor | None, vocab_size: int,
                 latency: Callable[[float], float] | None = None, host_s: float = 0.0) -> None:
        """prompt: [P] the row's prompt; source: [S] an encoder-decoder model's source; latency: q -> seconds of a
        step feeding q tokens (with `config.adaptive`)."""
        self.budget = config.step_budget
        self.index = SuffixIndex() if config.draft in ("retrieval", "merged") else None
        self.source = None
        if self.index is not None and source is not None:
            self.source = SuffixIndex()
            self.source.extend(source.tolist())
        self.table = AdjacencyTable(vocab_size, config.recycling_width) if config.draft in ("recycling", "merged") \
            else None
        self.observes_logits = self.table is not None
        self.window = LookaheadWindow.for_config(prompt, config)
        self.pool = NGramPool(config.ngram_size, config.guess_set_size) if self.window.width else None
        self.stats = AcceptanceStats(prior_rates(), group=kind_group)
        self.plan = Plan()
        window_tokens = self.window.width * (config.ngram_size - 1)
        self.cost = StepCost(latency, window_tokens, host_s) if config.adaptive else None

    def propose(self, ids: torch.Tensor, new_tokens: int) -> Draft:
        leads = []
        if self.index is not None:
            self.index.extend(ids[len(self.index.tokens) :].tolist())
            tail = self.index.tokens
            for index in (self.index, self.source):
                if index is not None:
                    leads += [Lead(tokens, tuple(retrieval_kind(match, d) for d in range(len(tokens))))
                              for tokens, match in index.continuations(tail, RETRIEVALS, self.budget)]
            last = tail[-1]
        else:
            last = int(ids[-1])
        if self.pool is not None:
            leads += [Lead(tokens, tuple(pool_kind(d) for d in range(len(tokens))))
                      for tokens in self.pool.candidates(last)]
        self.plan = plan_tree(last, leads, self.table, recycling_kind, self.stats, self.budget, self.cost, MARGIN)
        return Draft(self.window.levels, self.plan.candidates)

    def observe(self, outcome: Outcome) -> None:
        self.plan.record(outcome.accepted, self.stats)
        if self.cost is not None and outcome.seconds is not None:
            self.cost.observe(outcome.fed, outcome.seconds)
        if self.table is not None and outcome.inputs is not None:
            self.table.update(outcome.inputs, outcome.logits)
        if self.pool is not None and outcome.next_level is not None:
            self.pool.add_all(self.window.advance(outcome.next_level))
