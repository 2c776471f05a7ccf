"""The planning drafter: retrieval, token recycling and the Jacobi window's n-grams merged into one candidate tree
per step, planned by estimated acceptance (planner.py), with a fixed budget of nodes or cut where the expected tokens
per second peak (LookaheadConfig.adaptive). It is registered four times: "retrieval" and "recycling" (each alone,
without a window), "merged" (both, with the window's n-grams where window_size > 0) and "corpus" (a lade.Corpus
alone). Each of them also drafts from a corpus of earlier requests when the call passes one (corpus=)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from .acceptance import AcceptanceStats
from .base import Draft, Offer, Outcome
from .kinds import kind_group, pool_kind, prior_rates, recycling_kind, retrieval_kind
from .planner import Lead, Plan, plan_tree
from .pool import NGramPool
from .recycling import AdjacencyTable
from .registry import RowContext, register
from .retrieval import SuffixIndex
from .window import LookaheadWindow

if TYPE_CHECKING:
    from ..config import LookaheadConfig

RETRIEVALS = 4  # distinct retrieved continuations per source and step


@dataclass(frozen=True)
class PlanningOptions:
    """Settings of the planning drafts (`LookaheadConfig.draft_options`).

    correct_latency: with adaptive=True, correct the latency model by the call's timed steps (False plans with the
        latency model alone, e.g. to compare latency models on the same machine).
    """

    correct_latency: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.correct_latency, bool):
            raise ValueError(f"correct_latency must be True or False, got {self.correct_latency!r}")


@dataclass(frozen=True)
class RecyclingOptions(PlanningOptions):
    """PlanningOptions, and recycling_width: successors kept per token for recycling (the adjacency table's k)."""

    recycling_width: int = 8

    def __post_init__(self) -> None:
        super().__post_init__()
        width = self.recycling_width
        if isinstance(width, bool) or not isinstance(width, int) or not 1 <= width <= 64:
            raise ValueError(f"recycling_width must be an integer in [1, 64], got {width!r}")


class PlanningDrafter:
    def __init__(self, config: LookaheadConfig, row: RowContext, retrieval: bool, recycling: bool) -> None:
        """retrieval: continuations of the output's longest earlier suffix (prompt, output, source); recycling: the
        model's own top-k successors of every token it saw (config.draft_options.recycling_width); the window (with
        its n-gram pool) where config.window_size > 0."""
        options = config.draft_options
        self.budget = config.step_budget
        self.index = SuffixIndex() if retrieval else None
        self.source = None
        if self.index is not None and row.source is not None:
            self.source = SuffixIndex()
            self.source.extend(row.source.tolist())
        self.table = AdjacencyTable(row.vocab_size, options.recycling_width) if recycling else None
        self.observes_logits = self.table is not None
        self.corpus = row.corpus
        self.window = LookaheadWindow.for_config(row.prompt, config)
        self.pool = NGramPool(config.ngram_size, config.guess_set_size) if self.window.width else None
        self.stats = AcceptanceStats(prior_rates(self.corpus.acceptance() if self.corpus is not None else None),
                                     group=kind_group)
        self.plan = Plan()

    def propose(self, ids: torch.Tensor, new_tokens: int) -> Draft:
        """The whole planned tree (up to the step budget)."""
        offer = self.offer(ids, new_tokens)
        return offer.take(len(offer.values))

    def offer(self, ids: torch.Tensor, new_tokens: int) -> Offer:
        """The planned tree's nodes best first, for the batch to size (adaptive steps)."""
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
        if self.corpus is not None:
            leads += [Lead(tokens, kinds) for tokens, kinds in self.corpus.leads(ids, self.budget)]
        if self.pool is not None:
            leads += [Lead(tokens, tuple(pool_kind(d) for d in range(len(tokens))))
                      for tokens in self.pool.candidates(last)]
        self.plan = plan_tree(last, leads, self.table, recycling_kind, self.stats, self.budget, None)
        return Offer(self.plan.values, 1 + self.window.levels.numel(), self._take)

    def rest(self) -> Draft:
        """The draft of a step that feeds no draft node (the window alone), planned without a tree."""
        self.plan = Plan()
        return Draft(self.window.levels)

    def _take(self, k: int) -> Draft:
        self.plan.nodes = self.plan.nodes[:k]  # what the step feeds, and so what observe() counts as tested
        return Draft(self.window.levels, self.plan.candidates)

    def observe(self, outcome: Outcome) -> None:
        self.plan.record(outcome.accepted, self.stats)
        if self.table is not None and outcome.inputs is not None:
            self.table.update(outcome.inputs, outcome.logits)
        if self.pool is not None and outcome.next_level is not None:
            self.pool.add_all(self.window.advance(outcome.next_level))


def check_alone(config: LookaheadConfig) -> None:
    """Retrieval and recycling draft without the window (merged combines them with it)."""
    if config.window_size:
        raise ValueError(f"draft={config.draft!r} drafts alone, without the Jacobi window: set window_size=0, or "
                         "draft='merged' to combine the window with retrieval and recycling")
    check_planning(config)


def check_planning(config: LookaheadConfig) -> None:
    if not config.draft_options.correct_latency and not config.adaptive:
        raise ValueError("correct_latency=False changes only adaptive steps: set adaptive=True or drop it")


def corpus_drafter(config: LookaheadConfig, row: RowContext) -> PlanningDrafter:
    if row.corpus is None:
        raise ValueError("draft='corpus' drafts from a corpus of earlier requests: pass corpus=lade.Corpus() (kept "
                         "across calls), or choose another draft")
    return PlanningDrafter(config, row, retrieval=False, recycling=False)


register("retrieval", lambda config, row: PlanningDrafter(config, row, retrieval=True, recycling=False),
         options=PlanningOptions, check=check_alone, adaptive=True, corpus=True)
register("recycling", lambda config, row: PlanningDrafter(config, row, retrieval=False, recycling=True),
         options=RecyclingOptions, check=check_alone, adaptive=True, corpus=True)
register("merged", lambda config, row: PlanningDrafter(config, row, retrieval=True, recycling=True),
         options=RecyclingOptions, check=check_planning, adaptive=True, corpus=True)
register("corpus", corpus_drafter, options=PlanningOptions, check=check_alone, adaptive=True, corpus=True)
