"""Lookahead parallelism (arXiv 2402.02057, "lookahead parallelism") as a strategy of lade's one decoding loop.

Every rank holds a full model replica, its own KV cache and identical drafter state. Per step it feeds only its
share of the window columns and of the verification candidates (shard.py), then one all_gather of a few int64 per
rank (exchange.py) agrees on the accepted tokens and the next window level. Each rank keeps in its cache the KV of
the accepted tokens it verified itself and feeds the others (verified on another rank) before the root next step,
so all ranks emit the same sequence: plain greedy's.

Sampling (do_sample=True): rank 0 verifies the whole candidate tree with lade's lossless walk and its noise key (it
alone draws), the other ranks compute their window columns only and send no acceptance, so rank 0 always wins the
exchange. Window, pool and tree equal the single-process ones, so the output equals single-process `lade.generate`
with the same `sampling_seed`, whose sampling is lossless (lade/sampling.py).
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from ..drafters import Draft
from ..layout import StepLayout
from ..outputs import LookaheadStats
from ..rows import Row
from ..sampling import TokenChooser
from ..strategy import LocalStrategy
from ..tree import TokenTree
from ..verify import Acceptance
from .checks import (
    CONFIG_FINGERPRINT,
    INPUT_FINGERPRINT,
    check_parallel_generation,
    check_parallel_inputs,
    check_same_everywhere,
    check_shardable,
    config_fingerprint,
    input_fingerprint,
    require_group,
)
from .exchange import PeerFailure, StepExchange
from .shard import own_candidates, own_columns, shard_layout


@dataclass
class ParallelStats(LookaheadStats):
    """step_tokens[i]: tokens this rank fed in steady step i (its share of the step's work);
    refed_tokens: accepted tokens this rank fed again because another rank had verified them."""

    world_size: int = 1
    step_tokens: list[int] = field(default_factory=list)
    refed_tokens: int = 0

    def to_dict(self) -> dict:
        return {**super().to_dict(), "world_size": self.world_size, "step_tokens": list(self.step_tokens),
                "refed_tokens": self.refed_tokens}


class ParallelStrategy(LocalStrategy):
    returns_cache = False  # a rank's cache lacks the accepted tokens verified on other ranks
    adaptive_drafts = False  # every rank must draft alike: no drafter that learns from one rank's logits or timings

    def __init__(self, model, input_ids: torch.Tensor, gen, processors, model_kwargs: dict, requested_config) -> None:
        self.rank, self.world = require_group()
        self.sampling = bool(gen.do_sample)
        self.device = input_ids.device if dist.get_backend() == "nccl" else torch.device("cpu")
        requested = requested_config if requested_config is not None else getattr(gen, "lookahead_config", None)
        self._inputs = (model, input_ids, model_kwargs.get("attention_mask"), gen, processors, requested)
        self.exchange: StepExchange | None = None

    def new_stats(self) -> ParallelStats:
        return ParallelStats(world_size=self.world)

    def accepts(self, config) -> bool:
        """A config whose window shards across the ranks (check_shardable), or none: what "auto" may choose."""
        try:
            check_shardable(config, self.world)
        except ValueError:
            return False
        return True

    def setup(self, check, resolve) -> tuple:
        """Every check on every rank, all ranks raising together; "auto" resolved on rank 0 alone and broadcast (it
        times the model), any other value on every rank."""
        model, input_ids, attention_mask, gen, processors, requested = self._inputs
        timed = isinstance(requested, str)

        def check_all():
            pads = check()
            check_parallel_inputs(input_ids)
            return pads, None if timed else self._check_config(resolve(), gen)

        pads, config = self._agreed(check_all, lambda: input_fingerprint(
            model, input_ids, attention_mask, gen, processors, requested, self.world), INPUT_FINGERPRINT)
        if timed:
            config = self._from_rank0(resolve)
            self._agreed(lambda: self._check_config(config, gen), lambda: config_fingerprint(config),
                         CONFIG_FINGERPRINT)
        self.exchange = StepExchange(config.ngram_size, config.window_size, self.rank, self.world, self.device)
        return pads, config

    def _check_config(self, config, gen):
        check_shardable(config, self.world)
        check_parallel_generation(gen, config)
        return config

    def _agreed(self, check, values, names: tuple[str, ...]):
        """check() on every rank, then its `values` compared across ranks: every rank raises, or none does."""
        result, error, mine = None, None, None
        try:
            result = check()
            mine = values()
        except Exception as failure:  # raised on this rank after the peers learnt of it
            error = failure
        check_same_everywhere(mine, error, names, self.device)
        return result

    def _from_rank0(self, resolve):
        """resolve() on rank 0 (it may time the model), its result or its error on every rank."""
        box = [None]
        if self.rank == 0:
            try:
                box = [resolve()]
            except Exception as failure:
                box = [f"rank 0 could not resolve lookahead_config: {type(failure).__name__}: {failure}"]
        dist.broadcast_object_list(box, src=0)
        if isinstance(box[0], str):
            raise ValueError(box[0])
        return box[0]

    def layout(self, row: Row, draft: Draft, device: torch.device) -> StepLayout:
        """[pending tokens | root | window level 0 and own columns | own candidates (sampling: all on rank 0)]."""
        if self.sampling:
            tree = TokenTree(draft.candidates if self.rank == 0 else [])
        else:
            tree = TokenTree(own_candidates(draft.candidates, self.rank, self.world))
        columns = own_columns(draft.window.shape[1], self.rank, self.world)
        return shard_layout(row.ids[0, row.cached :].tolist(), draft.window, columns, tree, device)

    def verify(self, choose: TokenChooser, layout: StepLayout, logits: torch.Tensor, row: Row,
               keep_scores: bool) -> Acceptance:
        if self.sampling and self.rank != 0:
            return Acceptance([], [], [])
        return choose.walk(layout.tree, logits, row, keep_scores)

    def first(self, acc: Acceptance) -> Acceptance:
        if not self.sampling:
            return acc
        tokens = self.exchange.share_first(acc.tokens)
        return Acceptance(tokens, [], [0] * len(tokens))

    def agree(self, acc: Acceptance, next_level: torch.Tensor | None) -> tuple[list[int], torch.Tensor | None, int]:
        tokens, level = self.exchange.step(acc.tokens, next_level)
        drafted = acc.tokens[: len(acc.path)]
        verified = next((i for i, (a, b) in enumerate(zip(drafted, tokens)) if a != b), min(len(drafted), len(tokens)))
        return tokens, level, verified

    def record(self, stats: ParallelStats, layouts: list[StepLayout]) -> None:
        stats.step_tokens.append(layouts[0].size)
        stats.refed_tokens += layouts[0].root_row

    @contextmanager
    def guard(self):
        try:
            yield
        except PeerFailure:
            raise
        except Exception:
            self.exchange.abort()  # the peers raise PeerFailure instead of waiting for this rank
            raise

    def finish(self) -> None:
        self.exchange.finish()
