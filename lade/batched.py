"""Batched lookahead decoding (arXiv 2402.02057) for a batch of left-padded prompts, greedy.

Every row keeps its own Jacobi window and n-gram pool; one forward per step feeds all rows' layouts,
padded to a common q with dummy tokens, under per-row 4-D masks and logical positions counted from each
row's first real token (as `model.generate` does for left padding).

Cache layout: one common length C. Row b's slots are [its left padding | its tokens but the last | junk],
so its own tokens end at `cached_b = len(row ids) - 1`. A step appends Q slots to every row; row b then
moves its accepted KV to cached_b.. (right after its own tokens) and the cache is cropped after the
longest row. We chose this over shifting rows (copying O(C) per row and step, to keep rows right-aligned)
and over leaving holes in place (the cache would grow by the batch's best acceptance every step): each
step copies only accepted tokens and C stays the longest row's length; the junk tail of shorter rows is
masked. Finished rows leave the batch (cache.batch_select_indices), so they cost no more compute.

Output format equals batched `model.generate`: each row is [left-padded prompt | new tokens], finished
rows padded with pad_token_id up to the longest row.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass

import torch
from transformers import GenerationConfig
from transformers.cache_utils import DynamicCache
from transformers.generation.logits_process import LogitsProcessorList, RepetitionPenaltyLogitsProcessor
from transformers.generation.stopping_criteria import StoppingCriteriaList

from .cache import check_compactable, compact_rows
from .checks import check_batch, check_generation, left_padding, resolve_config
from .config import LookaheadConfig
from .layout import build_layout, stack_layouts
from .model_call import ModelCall
from .outputs import LookaheadDecoderOnlyOutput, LookaheadStats
from .pool import NGramPool
from .sampling import TokenChooser
from .tree import TokenTree
from .window import LookaheadWindow


def left_pad(prompts: list[torch.Tensor], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """[P_b] prompts -> ids [B, P] and attention mask [B, P], padded on the left (what lade's batches take)."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for b, p in enumerate(prompts):
        ids[b, width - len(p) :] = p
        mask[b, width - len(p) :] = 1
    return ids, mask


def is_batched(input_ids: torch.Tensor, attention_mask: torch.Tensor | None) -> bool:
    """More than one row, or one padded row: decoded by `batched_generate`."""
    return input_ids.shape[0] > 1 or (attention_mask is not None and not bool(attention_mask.all()))


@dataclass
class _Row:
    """One sequence of the batch: its padded ids, lookahead state and stopping."""

    index: int  # row in the input batch
    pad: int  # left-padding slots
    ids: torch.Tensor  # [1, S] left padding, prompt, accepted tokens
    window: LookaheadWindow
    pool: NGramPool
    processors: LogitsProcessorList  # this row's view of the batch's processors
    stats: LookaheadStats
    finished: bool = False

    @property
    def cached(self) -> int:
        """Cache slots in use: the padding and every token but the last."""
        return self.ids.shape[1] - 1

    @property
    def last_position(self) -> int:
        return self.cached - self.pad

    def emit(self, tokens: list[int], stopping_criteria: StoppingCriteriaList) -> int:
        """Append tokens until this row's stopping criteria fire; return how many were taken."""
        for i, token in enumerate(tokens):
            self.ids = torch.cat([self.ids, self.ids.new_tensor([[token]])], dim=1)  # [1, S + 1]
            if bool(stopping_criteria(self.ids, None)[0]):
                self.finished = True
                break
        taken = i + 1
        self.stats.record_step(taken)
        return taken


def _new_row(index: int, ids: torch.Tensor, pad: int, config: LookaheadConfig,
             processors: LogitsProcessorList) -> _Row:
    prompt = ids[pad:]  # [P_b] real tokens
    pool = NGramPool.for_config(config)
    if config.pool_from_prompt:
        pool.add_sequence(prompt.tolist())
    window = LookaheadWindow.for_config(prompt, config)
    return _Row(index, pad, ids.unsqueeze(0), window, pool, _row_processors(processors, index), LookaheadStats())


def _row_processors(processors: LogitsProcessorList, index: int) -> LogitsProcessorList:
    """Processors called with one row's ids [1, S]: per-batch state is cut to that row (generate gives the
    repetition penalty each row's padding length, to skip the padding)."""
    view = LogitsProcessorList()
    for proc in processors:
        if isinstance(proc, RepetitionPenaltyLogitsProcessor) and isinstance(proc.prompt_ignore_length, torch.Tensor):
            proc = copy.copy(proc)
            proc.prompt_ignore_length = int(proc.prompt_ignore_length[index])
        view.append(proc)
    return view


def batched_generate(
    model,
    input_ids: torch.LongTensor,  # [B, P] left-padded
    logits_processor: LogitsProcessorList,
    stopping_criteria: StoppingCriteriaList,
    generation_config: GenerationConfig,
    synced_gpus: bool = False,
    streamer=None,
    lookahead_config: LookaheadConfig | dict | None = None,
    **model_kwargs,
):
    config = resolve_config(lookahead_config, generation_config)
    check_batch(generation_config, logits_processor, stopping_criteria, streamer)
    check_generation(model, input_ids, generation_config, logits_processor, model_kwargs, synced_gpus)
    attention_mask = model_kwargs.get("attention_mask")
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    pads = left_padding(attention_mask)
    cache = model_kwargs.get("cache") or model_kwargs.get("past_key_values") or DynamicCache(config=model.config)
    check_compactable(cache, model.config.model_type)
    call = ModelCall(model, cache, config.attention)
    choose = TokenChooser.for_generation(bool(generation_config.do_sample), config, input_ids.device)
    stats = LookaheadStats()
    start = time.perf_counter()

    # 1. prefill: every row's prompt KV and first new token
    with stats.timed_forward(input_ids.device):
        logits = call.prefill_padded(input_ids, attention_mask)  # [B, V]
    rows = [_new_row(b, input_ids[b], pads[b], config, logits_processor) for b in range(input_ids.shape[0])]
    emitted = 0
    for b, row in enumerate(rows):
        first = choose.walk(TokenTree([]), logits[b : b + 1], row.ids, row.processors, False)
        emitted += row.emit(first.tokens, stopping_criteria)
    stats.record_step(emitted)
    active = _drop_finished(rows, cache)

    # 2. steady steps over the rows still running
    while active:
        past = cache.get_seq_length()
        # 2a. per-row layouts, padded to one q
        layouts = []
        for row in active:
            before, last = row.ids[0, -2:].tolist()
            if config.pool_from_output:
                row.pool.add_tail(row.ids[0, row.pad :], row.stats.last_accepted)
            layouts.append(build_layout(last, row.window.levels, TokenTree(row.pool.candidates(last, before)),
                                        input_ids.device))
        batch = stack_layouts(layouts)
        slots = torch.arange(past, device=input_ids.device)  # [C]
        cached = torch.tensor([row.cached for row in active], device=input_ids.device)  # [B]
        pad = torch.tensor([row.pad for row in active], device=input_ids.device)  # [B]
        cache_visible = (slots >= pad[:, None]) & (slots < cached[:, None])  # [B, C]
        # 2b. one forward for every row and branch
        with stats.timed_forward(input_ids.device):
            logits = call.step_batch(batch, cached - pad, cache_visible)  # [B, Q, V]
        # 2c. per row: verify, advance the window, refresh the pool, emit
        starts, keeps, emitted = [], [], 0
        for row, layout, row_logits in zip(active, layouts, logits):
            tree_logits = torch.cat([row_logits[:1], row_logits[layout.tree_start : layout.size]])  # [1 + T, V]
            acc = choose.walk(layout.tree, tree_logits, row.ids, row.processors, False)
            if row.window.width:
                top = row_logits[layout.top_level_rows]  # [W, V]
                row.pool.add_all(row.window.advance(choose.window_level(top, row.ids, row.processors)))
            starts.append(row.cached)
            keeps.append([0] + [layout.tree_start + n for n in acc.path])
            emitted += row.emit(acc.tokens, stopping_criteria)
        stats.record_step(emitted)
        # 2d. finished rows leave the batch; the others keep their accepted KV contiguous
        survivors = [i for i, row in enumerate(active) if not row.finished]
        active = _drop_finished(active, cache)
        if active:
            compact_rows(cache, past, [starts[i] for i in survivors], [keeps[i] for i in survivors])

    stats.total_time_s = time.perf_counter() - start
    sequences = _pad_rows(rows, generation_config)
    if not generation_config.return_dict_in_generate:
        return sequences
    return LookaheadDecoderOnlyOutput(sequences=sequences, lookahead_stats=stats,
                                      row_stats=[row.stats for row in rows])


def _drop_finished(rows: list[_Row], cache) -> list[_Row]:
    keep = [i for i, row in enumerate(rows) if not row.finished]
    if len(keep) < len(rows) and keep:
        cache.batch_select_indices(torch.tensor(keep, device=rows[0].ids.device))
    return [rows[i] for i in keep]


def _pad_rows(rows: list[_Row], generation_config: GenerationConfig) -> torch.Tensor:
    """Stack rows [1, S_b] into [B, max S_b], finished rows padded with pad_token_id as `model.generate` does."""
    length = max(row.ids.shape[1] for row in rows)
    pad_id = getattr(generation_config, "_pad_token_tensor", None)
    if pad_id is None:
        pad_id = generation_config.pad_token_id
    if pad_id is None and any(row.ids.shape[1] < length for row in rows):
        raise ValueError("rows finished at different lengths and no pad_token_id is set: pass pad_token_id=")
    out = rows[0].ids.new_full((len(rows), length), int(pad_id) if pad_id is not None else 0)  # [B, S]
    for b, row in enumerate(rows):
        out[b, : row.ids.shape[1]] = row.ids[0]
    return out
