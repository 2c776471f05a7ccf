"""The decoding loop of lookahead decoding (Fu, Bailis, Stoica, Zhang, "Break the Sequential Dependency of LLM
Inference Using Lookahead Decoding", ICML 2024, arXiv 2402.02057), for every decoding mode: one loop over the rows
of a batch (a single sequence is a batch of one); greedy or lossless sampling (the TokenChooser); one process or
lookahead parallelism (the strategy); any drafter.

One steady step, per row: the drafter proposes a draft (adaptive drafts are sized for the whole batch at once,
lade/drafters/allocation.py); the row feeds [last token | Jacobi window | candidate
tree] with a tree attention mask at logical positions, in one forward with every other row; the tree is verified
from the root (greedy: the model's own argmax chain; sampling: each position's token drawn with its keyed noise);
the drafter observes what was accepted and the window's next level; the KV of the accepted tokens is moved into
contiguous cache slots and everything else is cropped away; the accepted tokens are emitted, cut exactly where plain
decoding stops.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache
from transformers.generation.stopping_criteria import StoppingCriteriaList

from .cache import compact, crop, self_attention_cache
from .drafters import Draft, Outcome
from .drafters.allocation import StepSizer
from .layout import cache_visibility, stack_layouts
from .model_call import ModelCall
from .outputs import LookaheadStats
from .rope import Positions
from .rows import Row
from .sampling import TokenChooser
from .strategy import Strategy
from .tree import TokenTree


@dataclass
class Run:
    """What every step of one generate call shares."""

    call: ModelCall
    cache: Cache
    choose: TokenChooser
    strategy: Strategy
    stopping_criteria: StoppingCriteriaList
    streamer: object | None
    stats: LookaheadStats
    keep_scores: bool
    positions: Positions  # where a step may place tokens (a position table's end, scaled RoPE) and re-encodes
    device: torch.device
    sizer: StepSizer | None = None  # sizes adaptive drafts for the whole batch (None: each drafter proposes its own)


def decode(run: Run, rows: list[Row], input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
           past: int) -> None:
    """input_ids: [B, P] left-padded prompts (attention_mask [B, P], None without padding), of which the first
    `past` tokens are in the cache already. Decodes every row until it stops."""
    # 1. prefill: every row's prompt KV and first new token
    if run.positions.reencodes(input_ids.shape[1], past):
        crop(run.cache, 0)  # plain generate drops this cache and encodes the whole prompt (rope.py)
        past = 0
    active = prefill(run, rows, input_ids, attention_mask, past)

    # 2. steady steps over the rows still running (a sequence that reaches the length where plain generate
    # re-encodes it is re-encoded alone: batches that would reach it are refused up front)
    while active:
        row = active[0]
        if len(active) == 1 and run.positions.reencodes(row.ids.shape[1], row.cached):
            crop(run.cache, 0)
            mask = row.ids.new_tensor([[0] * row.pad + [1] * (row.ids.shape[1] - row.pad)]) if row.pad else None
            active = prefill(run, active, row.ids, mask, 0)
        else:
            active = step(run, active)


def prefill(run: Run, rows: list[Row], input_ids: torch.Tensor, attention_mask: torch.Tensor | None,
            past: int) -> list[Row]:
    """Feed input_ids [B, P] (the first `past` slots cached) and emit each row's next token; returns the rows still
    running."""
    with run.stats.timed_forward(run.device):
        logits = run.call.prefill(input_ids, attention_mask, past)  # [B, V]
    emitted = 0
    for b, row in enumerate(rows):
        row.cached = input_ids.shape[1]
        first = run.strategy.first(run.choose.walk(TokenTree([]), logits[b : b + 1], row, run.keep_scores))
        emitted += row.emit(first.tokens, first.scores, logits[b : b + 1], run.stopping_criteria, run.streamer)
    run.stats.record_step(emitted)
    return _leave_finished(rows, run.cache)


def step(run: Run, active: list[Row]) -> list[Row]:
    """One steady step of every active row; returns the rows still running."""
    # 2a. each row's draft laid out as [tokens not in the cache | window | candidate tree] (this rank's share)
    layouts = [run.strategy.layout(row, draft, run.device) for row, draft in zip(active, _drafts(run, active))]
    batch = stack_layouts(layouts)
    past = self_attention_cache(run.cache).get_seq_length()
    first_positions = torch.tensor([row.first_fed_position for row in active], device=run.device)  # [B]
    visible = cache_visibility([row.pad for row in active], [row.cached for row in active], past, run.device)
    run.strategy.record(run.stats, layouts)
    # 2b. one forward for every row and branch
    with run.stats.timed_forward(run.device):
        logits = run.call.step(batch, first_positions, past, visible)  # [B, K, V]
    if run.sizer is not None:
        run.sizer.observe(len(active) * batch.size, run.stats.last_forward_s)  # the batch's whole width was timed
    # 2c. per row: verify the tree, agree on it (across ranks), let the drafter observe, emit
    starts, keeps, emitted = [], [], 0
    for b, (row, layout, row_logits) in enumerate(zip(active, layouts, logits)):
        tree_rows = batch.kept_index([layout.root_row, *range(layout.tree_start, layout.size)])
        tree_logits = take_rows(row_logits, tree_rows)  # [1 + T, V]: the root, then tree node n at 1 + n
        acc = run.strategy.verify(run.choose, layout, tree_logits, row, run.keep_scores)
        top = take_rows(row_logits, batch.kept_index(layout.top_rows)) if layout.top_rows else None  # [W, V]
        level = run.choose.window_level(top, row.ids, row.processors) if top is not None else None
        tokens, level, verified = run.strategy.agree(acc, level)
        row.stats.tree_nodes.append(len(layout.tree))
        timing = dict(fed=layout.size, seconds=run.stats.last_forward_s if len(active) == 1 else None)
        if row.drafter.observes_logits:
            real = batch.kept_real(b)
            row.drafter.observe(Outcome(tokens, level, batch.input_ids[b, batch.kept[:real]], row_logits[:real],
                                        **timing))
        else:
            row.drafter.observe(Outcome(tokens, level, **timing))
        starts.append(row.cached)
        keeps.append([*range(layout.root_row + 1), *(layout.tree_start + n for n in acc.path[:verified])])
        row.cached += len(keeps[-1])
        token_logits = tree_logits[acc.rows] if row.logits is not None else None
        emitted += row.emit(tokens, acc.scores, token_logits, run.stopping_criteria, run.streamer)
    run.stats.record_step(emitted)
    # 2d. each row's accepted KV moved into contiguous slots, the rest cropped; finished rows leave the batch
    compact(run.cache, past, starts, keeps)
    return _leave_finished(active, run.cache)


def take_rows(t: torch.Tensor, rows: list[int]) -> torch.Tensor:
    """t[rows] for ascending `rows`, as a view when they are one run of consecutive rows, else one cat of the runs."""
    starts = [0] + [i for i in range(1, len(rows)) if rows[i] != rows[i - 1] + 1] + [len(rows)]
    runs = [t[rows[a] : rows[b - 1] + 1] for a, b in zip(starts, starts[1:])]
    return runs[0] if len(runs) == 1 else torch.cat(runs)


def _drafts(run: Run, rows: list[Row]) -> list[Draft]:
    """Each row drafter's proposal (sized for the whole batch's step where run.sizer is set, or no draft node while it
    rests), cut by `_within`."""
    if run.sizer is None:
        drafts = [row.drafter.propose(row.tokens, row.stats.last_accepted) for row in rows]
    elif run.sizer.plans():
        drafts = run.sizer.drafts([row.drafter.offer(row.tokens, row.stats.last_accepted) for row in rows])
    else:
        drafts = [row.drafter.rest() for row in rows]
    past = self_attention_cache(run.cache).get_seq_length() if run.positions.keys is not None else 0
    return [_within(run, row, draft, past) for row, draft in zip(rows, drafts)]


def _within(run: Run, row: Row, draft: Draft, past: int) -> Draft:
    """The draft cut to the positions where the step computes what plain decoding would (rope.py), and to the keys
    one forward may hold after the `past` cached slots (Positions.room)."""
    last = row.tokens.numel() - 1  # the last token's logical position
    bound = run.positions.last_position(last, row.pad)
    draft = draft if bound is None else draft.within(bound - last)
    fed = row.tokens.numel() + row.pad - row.cached  # tokens the row feeds besides its draft
    room = run.positions.room(past + fed)
    return draft if room is None else draft.fitting(room)


def _leave_finished(rows: list[Row], cache: Cache) -> list[Row]:
    keep = [i for i, row in enumerate(rows) if not row.finished]
    if keep and len(keep) < len(rows):
        cache.batch_select_indices(torch.tensor(keep, device=rows[0].ids.device))
    return [rows[i] for i in keep]
