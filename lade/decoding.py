"""The lookahead decoding loop (Fu et al., "Break the Sequential Dependency of LLM Inference Using
Lookahead Decoding", arXiv 2402.02057), written as a transformers `custom_generate` callable.

Each step feeds one fused sequence [last token | Jacobi window | candidate tree] with a tree attention
mask and logical position ids, verifies the tree, advances the window, refreshes the n-gram pool and
compacts the KV cache to the accepted tokens. No modeling code is touched.
"""

from __future__ import annotations

import time
from functools import partial

import torch
from transformers import GenerationConfig
from transformers.cache_utils import DynamicCache
from transformers.generation.logits_process import LogitsProcessorList
from transformers.generation.stopping_criteria import StoppingCriteriaList

from .cache import check_compactable, compact
from .checks import check_generation, resolve_config
from .config import LookaheadConfig
from .layout import build_layout
from .model_call import ModelCall
from .outputs import LookaheadDecoderOnlyOutput, LookaheadStats
from .pool import NGramPool
from .sampling import make_generator, sample_walk, sample_window
from .tree import TokenTree
from .verify import greedy_walk
from .window import LookaheadWindow


class _Sequence:
    """The growing output of one sequence: ids, stopping, streaming and optional per-token scores."""

    def __init__(self, input_ids, stopping_criteria, streamer, keep_scores: bool, keep_logits: bool) -> None:
        self.ids = input_ids  # [1, S]
        self.stopping_criteria = stopping_criteria
        self.streamer = streamer
        self.scores: list[torch.Tensor] | None = [] if keep_scores else None
        self.logits: list[torch.Tensor] | None = [] if keep_logits else None
        self.finished = False

    def emit(self, tokens: list[int], scores: list[torch.Tensor], logits: torch.Tensor) -> int:
        """Append tokens one by one until a stopping criterion fires; return how many were taken."""
        for i, token in enumerate(tokens):
            self.ids = torch.cat([self.ids, self.ids.new_tensor([[token]])], dim=1)
            if self.scores is not None:
                self.scores.append(scores[i])
            if self.logits is not None:
                self.logits.append(logits[i : i + 1])
            if self.streamer is not None:
                self.streamer.put(self.ids[:, -1].cpu())
            if bool(self.stopping_criteria(self.ids, scores[i] if scores else None).all()):
                self.finished = True
                return i + 1
        return len(tokens)


def lookahead_generate(
    model,
    input_ids: torch.LongTensor,  # [1, P]
    logits_processor: LogitsProcessorList,
    stopping_criteria: StoppingCriteriaList,
    generation_config: GenerationConfig,
    synced_gpus: bool = False,
    streamer=None,
    lookahead_config: LookaheadConfig | dict | None = None,
    lookahead_streamer=None,
    **model_kwargs,
):
    """transformers `custom_generate` entry point.

    The lookahead parameters come from `lookahead_config=` (a keyword of `model.generate` once this
    callable is the custom_generate) or else from `generation_config.lookahead_config`.
    transformers 5.24 hands a callable custom_generate no `streamer`: pass `lookahead_streamer=` instead
    (it receives the prompt, then every new token once, in order).
    """
    config = resolve_config(lookahead_config, generation_config)
    if lookahead_streamer is not None:
        streamer = lookahead_streamer
        streamer.put(input_ids.cpu())
    check_generation(model, input_ids, generation_config, logits_processor, model_kwargs, synced_gpus)
    cache = model_kwargs.get("cache") or model_kwargs.get("past_key_values") or DynamicCache(config=model.config)
    check_compactable(cache, model.config.model_type)
    keep_scores = bool(generation_config.return_dict_in_generate and generation_config.output_scores)
    keep_logits = bool(generation_config.return_dict_in_generate and generation_config.output_logits)
    seq = _Sequence(input_ids, stopping_criteria, streamer, keep_scores, keep_logits)
    call = ModelCall(model, cache)
    stats = LookaheadStats()
    sampling = bool(generation_config.do_sample)
    generator = make_generator(config.sampling_seed, input_ids.device) if sampling else None
    walk = partial(sample_walk, generator=generator) if sampling else greedy_walk
    start = time.perf_counter()

    # 1. prefill: the prompt's KV and the first new token
    with stats.timed_forward(input_ids.device):
        logits = call.prefill(input_ids)  # [1, V]
    first = walk(TokenTree([]), logits, input_ids, logits_processor, keep_scores)
    stats.record_step(seq.emit(first.tokens, first.scores, logits[first.rows]))

    # 2. lookahead state: the Jacobi window and the n-gram pool
    window = LookaheadWindow.from_prompt(input_ids[0], config.window_size, config.ngram_size, config.seed)
    pool = NGramPool(config.ngram_size, config.guess_set_size)
    if config.pool_from_prompt:
        pool.add_sequence(input_ids[0].tolist())

    # 3. steady steps
    while not seq.finished:
        past = seq.ids.shape[1] - 1  # the cache holds everything but the last token
        last = int(seq.ids[0, -1])
        if config.pool_from_output:
            pool.add_sequence(seq.ids[0, -(stats.last_accepted + config.ngram_size - 1) :].tolist())
        # 3a. layout: [last | window | candidate tree], positions and tree mask
        layout = build_layout(last, window.levels, TokenTree(pool.candidates(last)), input_ids.device)
        # 3b. one forward for all branches
        with stats.timed_forward(input_ids.device):
            logits = call.step(layout, past)  # [q, V]
        # 3c. verify the tree (rows: root, then tree nodes)
        tree_logits = torch.cat([logits[:1], logits[layout.tree_start :]])  # [1 + T, V]
        acc = walk(layout.tree, tree_logits, seq.ids, logits_processor, keep_scores)
        # 3d. advance the window one Jacobi iteration; its completed n-grams refresh the pool
        top = logits[layout.top_level_rows(window.width)]  # [W, V]
        if sampling and config.sample_window:
            new_level = sample_window(top, seq.ids, logits_processor, generator)  # [W]
        else:
            new_level = top.argmax(-1)  # [W]
        pool.add_all(window.advance(new_level))
        # 3e. keep the KV of the last token and the accepted drafts, crop the rest
        compact(cache, past, [0] + [layout.tree_start + n for n in acc.path])
        # 3f. emit (cut at EOS / max length / stop strings, exactly where plain decoding stops)
        rows = [0 if r == 0 else layout.tree_start + r - 1 for r in acc.rows]
        stats.record_step(seq.emit(acc.tokens, acc.scores, logits[rows]))

    stats.total_time_s = time.perf_counter() - start
    if streamer is not None:
        streamer.end()
    if not generation_config.return_dict_in_generate:
        return seq.ids
    return LookaheadDecoderOnlyOutput(
        sequences=seq.ids,
        scores=tuple(seq.scores) if seq.scores is not None else None,
        logits=tuple(seq.logits) if seq.logits is not None else None,
        cache=cache,
        lookahead_stats=stats,
    )
