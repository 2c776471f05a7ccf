"""The lookahead decoding loop (Fu et al., "Break the Sequential Dependency of LLM Inference Using
Lookahead Decoding", arXiv 2402.02057), written as a transformers `custom_generate` callable.

Each step feeds one fused sequence [last token | Jacobi window | candidate tree] with a tree attention
mask and logical position ids, verifies the tree, advances the window, refreshes the n-gram pool and
compacts the KV cache to the accepted tokens. No modeling code is touched.
"""

from __future__ import annotations

import time

import torch
from transformers import GenerationConfig
from transformers.generation.logits_process import LogitsProcessorList
from transformers.generation.stopping_criteria import StoppingCriteriaList

from .batched import batched_generate, is_batched
from .cache import check_compactable, compact
from .checks import check_generation, resolve_config
from .config import LookaheadConfig
from .encoder_decoder import model_call, new_cache
from .layout import build_layout
from .outputs import LookaheadDecoderOnlyOutput, LookaheadEncoderDecoderOutput, LookaheadStats
from .pool import NGramPool
from .sampling import TokenChooser
from .tree import TokenTree
from .window import LookaheadWindow


class OutputSequence:
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
    input_ids: torch.LongTensor,  # [1, P]; a batch or padded prompt goes to batched_generate
    logits_processor: LogitsProcessorList,
    stopping_criteria: StoppingCriteriaList,
    generation_config: GenerationConfig,
    synced_gpus: bool = False,
    streamer=None,
    lookahead_config: LookaheadConfig | dict | None = None,
    lookahead_streamer=None,
    lookahead_source_ids: torch.Tensor | None = None,
    **model_kwargs,
):
    """transformers `custom_generate` entry point.

    The lookahead parameters come from `lookahead_config=` (a keyword of `model.generate` once this
    callable is the custom_generate) or else from `generation_config.lookahead_config`.
    transformers 5.24 hands a callable custom_generate no `streamer`: pass `lookahead_streamer=` instead
    (it receives the prompt, then every new token once, in order).
    lookahead_source_ids ([1, S]): an encoder-decoder model's source tokens, whose n-grams also seed the pool
    (generate hands the loop only the decoder prompt; `lade.generate` passes the source itself).
    """
    # a decoder-only batch, or padding: see lade/batched.py
    if not model.config.is_encoder_decoder and is_batched(input_ids, model_kwargs.get("attention_mask")):
        return batched_generate(model, input_ids, logits_processor, stopping_criteria, generation_config,
                                synced_gpus, streamer, lookahead_config, **model_kwargs)
    if lookahead_streamer is not None:
        streamer = lookahead_streamer
        streamer.put(input_ids.cpu())
    check_generation(model, input_ids, generation_config, logits_processor, model_kwargs, synced_gpus)
    config = resolve_config(lookahead_config, generation_config, model)
    cache = model_kwargs.get("cache") or model_kwargs.get("past_key_values") or new_cache(model)
    check_compactable(cache, model.config.model_type)
    keep_scores = bool(generation_config.return_dict_in_generate and generation_config.output_scores)
    keep_logits = bool(generation_config.return_dict_in_generate and generation_config.output_logits)
    seq = OutputSequence(input_ids, stopping_criteria, streamer, keep_scores, keep_logits)
    call = model_call(model, cache, model_kwargs, config.attention)
    stats = LookaheadStats()
    choose = TokenChooser.for_generation(bool(generation_config.do_sample), config, input_ids.device)
    start = time.perf_counter()

    # 1. prefill: the prompt's KV and the first new token
    with stats.timed_forward(input_ids.device):
        logits = call.prefill(input_ids)  # [1, V]
    first = choose.walk(TokenTree([]), logits, input_ids, logits_processor, keep_scores)
    stats.record_step(seq.emit(first.tokens, first.scores, logits[first.rows]))

    # 2. lookahead state: the Jacobi window and the n-gram pool
    window = LookaheadWindow.for_config(input_ids[0], config)
    pool = NGramPool.for_config(config)
    if config.pool_from_prompt:
        for context in (lookahead_source_ids, input_ids):
            if context is not None:
                pool.add_sequence(context[0].tolist())

    # 3. steady steps
    while not seq.finished:
        past = seq.ids.shape[1] - 1  # the cache holds everything but the last token
        before, last = seq.ids[0, -2:].tolist()
        if config.pool_from_output:
            pool.add_tail(seq.ids[0], stats.last_accepted)
        # 3a. layout: [last | window | candidate tree], positions and tree mask
        layout = build_layout(last, window.levels, TokenTree(pool.candidates(last, before)), input_ids.device)
        # 3b. one forward for all branches
        with stats.timed_forward(input_ids.device):
            logits = call.step(layout, past)  # [1 + W + T, V]: root, top window level, tree nodes
        # 3c. verify the tree (rows: root, then tree nodes)
        tree_logits = torch.cat([logits[:1], logits[layout.kept_tree_start :]])  # [1 + T, V]
        acc = choose.walk(layout.tree, tree_logits, seq.ids, logits_processor, keep_scores)
        # 3d. advance the window one Jacobi iteration; its completed n-grams refresh the pool
        if window.width:
            top = logits[1 : layout.kept_tree_start]  # [W, V]
            pool.add_all(window.advance(choose.window_level(top, seq.ids, logits_processor)))
        # 3e. keep the KV of the last token and the accepted drafts, crop the rest
        compact(cache, past, [0] + [layout.tree_start + n for n in acc.path])
        # 3f. emit (cut at EOS / max length / stop strings, exactly where plain decoding stops)
        rows = [0 if r == 0 else layout.kept_tree_start + r - 1 for r in acc.rows]
        stats.record_step(seq.emit(acc.tokens, acc.scores, logits[rows]))

    stats.total_time_s = time.perf_counter() - start
    if streamer is not None:
        streamer.end()
    if not generation_config.return_dict_in_generate:
        return seq.ids
    output_type = LookaheadEncoderDecoderOutput if model.config.is_encoder_decoder else LookaheadDecoderOnlyOutput
    return output_type(
        sequences=seq.ids,
        scores=tuple(seq.scores) if seq.scores is not None else None,
        logits=tuple(seq.logits) if seq.logits is not None else None,
        cache=cache,
        lookahead_stats=stats,
    )
