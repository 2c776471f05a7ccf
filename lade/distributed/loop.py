"""The lookahead-parallel decoding loop (arXiv 2402.02057, "lookahead parallelism"), a transformers
`custom_generate` callable run by every rank of a torch.distributed group.

Every rank holds a full model replica, its own KV cache and identical window and pool state. Per step it
feeds only its share of the window columns and of the verification candidates (see shard.py), then one
all_gather of a few int64 per rank (exchange.py) agrees on the accepted tokens and the next window level.
Each rank compacts its own cache to the accepted tokens it verified itself and feeds the others (accepted
on another rank) before the root next step, so all ranks emit the same sequence: plain greedy's.

Sampling (do_sample=True): rank 0 verifies the whole candidate tree with lade's lossless walk and its seeded
generator (it alone draws), the other ranks compute their window columns only and send no acceptance, so rank
0 always wins the exchange. Window, pool and tree equal the single-process ones, so the output equals
single-process `lade.generate` with the same `sampling_seed`, whose sampling is lossless (lade/sampling.py).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from transformers import GenerationConfig
from transformers.cache_utils import DynamicCache
from transformers.generation.logits_process import LogitsProcessorList
from transformers.generation.stopping_criteria import StoppingCriteriaList

from ..cache import check_compactable, compact
from ..checks import check_generation, resolve_config
from ..config import LookaheadConfig
from ..decoding import OutputSequence
from ..model_call import ModelCall
from ..outputs import LookaheadDecoderOnlyOutput, LookaheadStats
from ..pool import NGramPool
from ..sampling import TokenChooser
from ..tree import TokenTree
from ..verify import Acceptance
from ..window import LookaheadWindow
from .checks import check_parallel_generation, check_same_everywhere, check_shardable, fingerprint, require_group
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


def parallel_generate(
    model,
    input_ids: torch.LongTensor,  # [1, P], the same on every rank
    logits_processor: LogitsProcessorList,
    stopping_criteria: StoppingCriteriaList,
    generation_config: GenerationConfig,
    synced_gpus: bool = False,
    streamer=None,
    lookahead_config: LookaheadConfig | dict | None = None,
    lookahead_streamer=None,
    **model_kwargs,
):
    """transformers `custom_generate` entry point of lookahead parallelism (greedy, or sampling verified on rank 0)."""
    rank, world = require_group()
    comm_device = input_ids.device if dist.get_backend() == "nccl" else torch.device("cpu")
    values, local_error = None, None
    try:
        config = resolve_config(lookahead_config, generation_config)
        check_shardable(config, world)
        check_parallel_generation(generation_config, config)
        check_generation(model, input_ids, generation_config, logits_processor, model_kwargs, synced_gpus)
        cache = model_kwargs.get("cache") or model_kwargs.get("past_key_values") or DynamicCache(config=model.config)
        check_compactable(cache, model.config.model_type)
        values = fingerprint(model, input_ids, config, generation_config, logits_processor, world)
    except ValueError as error:
        local_error = error
    check_same_everywhere(values, local_error, comm_device)  # every rank raises, or none does
    if lookahead_streamer is not None:
        streamer = lookahead_streamer
        streamer.put(input_ids.cpu())
    exchange = StepExchange(config.ngram_size, config.window_size, rank, world, comm_device)
    seq = OutputSequence(input_ids, stopping_criteria, streamer, keep_scores=False, keep_logits=False)
    stats = ParallelStats(world_size=world)
    start = time.perf_counter()
    try:
        choose = TokenChooser.for_generation(bool(generation_config.do_sample), config, input_ids.device)
        _decode(model, cache, seq, config, logits_processor, exchange, stats, choose)
    except PeerFailure:
        raise
    except Exception:
        exchange.abort()  # the peers raise PeerFailure instead of waiting for this rank
        raise
    stats.total_time_s = time.perf_counter() - start
    if streamer is not None:
        streamer.end()
    if not generation_config.return_dict_in_generate:
        return seq.ids
    return LookaheadDecoderOnlyOutput(sequences=seq.ids, cache=cache, lookahead_stats=stats)


def _decode(model, cache, seq: OutputSequence, config: LookaheadConfig, processors: LogitsProcessorList,
            exchange: StepExchange, stats: ParallelStats, choose: TokenChooser) -> None:
    rank, world, device = exchange.rank, exchange.world, seq.ids.device
    verifies = rank == 0 or not choose.sampling  # under sampling only rank 0 verifies (and draws)
    call = ModelCall(model, cache)
    prompt = seq.ids[0]  # [P]
    no_logits = torch.empty(0)

    # 1. prefill (every rank): the prompt's KV and the first new token
    with stats.timed_forward(device):
        logits = call.prefill(seq.ids)  # [1, V]
    first = choose.walk(TokenTree([]), logits, seq.ids, processors, False).tokens if verifies else [0]
    stats.record_step(seq.emit(exchange.share_first(first) if choose.sampling else first, [], no_logits))

    # 2. lookahead state, identical on every rank: the full window and the pool
    window = LookaheadWindow.from_prompt(prompt, config.window_size, config.ngram_size, config.seed)
    pool = NGramPool.for_config(config)
    if config.pool_from_prompt:
        pool.add_sequence(prompt.tolist())
    columns = own_columns(config.window_size, rank, world)
    pending = seq.ids[0, -1:].tolist()  # accepted tokens not in this rank's cache; the last is the root

    # 3. steady steps
    while not seq.finished:
        past = seq.ids.shape[1] - len(pending)
        if config.pool_from_output:
            pool.add_tail(seq.ids[0], stats.last_accepted)
        # 3a. this rank's share: [pending | level 0 + own columns | own candidates' tree (sampling: rank 0, all)]
        candidates = pool.candidates(pending[-1], before=int(seq.ids[0, -2]))
        tree = TokenTree(candidates if choose.sampling else own_candidates(candidates, rank, world))
        tree = tree if verifies else TokenTree([])
        shard = shard_layout(pending, window.levels, columns, tree, device)
        stats.step_tokens.append(shard.layout.size)
        stats.refed_tokens += shard.root_row
        # 3b. one forward
        with stats.timed_forward(device):
            logits = call.step(shard.layout, past, all_rows=True)  # [q, V]
        # 3c. verify own candidates (rows: root, then tree nodes)
        tree_logits = torch.cat([logits[shard.root_row : shard.root_row + 1], logits[shard.tree_start :]])
        acc = choose.walk(tree, tree_logits, seq.ids, processors, False) if verifies else Acceptance([], [], [])
        # 3d. agree with the other ranks: the longest acceptance wins; reassemble the next window level
        tokens, new_level = exchange.step(acc.tokens, logits[shard.top_rows].argmax(-1))
        pool.add_all(window.advance(new_level))
        # 3e. keep the KV of the pending tokens and of own drafts that the winner accepted, crop the rest
        verified_here = _common_prefix(acc.tokens[: len(acc.path)], tokens)
        compact(cache, past, list(range(shard.root_row + 1)) + [shard.tree_start + n for n in acc.path[:verified_here]])
        pending = tokens[verified_here:]
        # 3f. emit (every rank emits the same tokens, so every rank stops at the same place)
        stats.record_step(seq.emit(tokens, [], no_logits))


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n
