"""When "auto" hands a whole call to plain decoding: a batch where no draft is priced to pay.

A step of R rows feeding q tokens each costs what the device takes for an [R, q] step: a batch's spare compute is
shared by its rows, so drafting is dearer than for one sequence. Before any forward, "auto" with R > 1 rows asks the
model's latency profile of R-row steps whether drafting can pay at all: whether a step feeding every row one good
draft token (accepted with probability GOOD_DRAFT) beats transformers' plain batched step by MIN_SPEEDUP, counting
each row's drafting host work (HOST_S) and lade's loop's work beyond transformers' loop (LOOP_S). Where it can,
lade's loop runs and sizes every step for the batch (lade/drafters/allocation.py: drafts only where they pay, plain
batched steps otherwise, resting from planning while nothing pays); where even that draft cannot pay, no step would
draft and the call runs through transformers' own loop (`_sample`, what `model.generate` runs), its steps writing
their KV in place as in lade's own loop (lade.cache.slotted). One sequence never hands over: its plain steps take the
model's plain decoding path, and its adaptive drafts are sized step by step. Beam search never hands over either: its
own loop prices every step (lade.beams.BeamPricing), and its undrafted steps cost no more than transformers' beam
steps, which copy every beam's whole cache twice per step (lade.beams).
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext

import torch
from transformers import GenerationConfig

from .cache import slotted
from .compat import CACHE_KWARG, eos_token_tensor
from .cost import HOST_S, LOOP_S, MIN_SPEEDUP, latency_profile
from .outputs import LookaheadDecoderOnlyOutput, LookaheadEncoderDecoderOutput, LookaheadStats

GOOD_DRAFT = 0.4  # acceptance of the draft token a batch's rule prices (a good first draft token on chat)


def rows_latency(model, rows: int, latency: Callable[[float], float] | None) -> Callable[[float], float]:
    """q -> seconds of a step of `rows` rows feeding q tokens each: the model's measured profile of rows-row steps
    (lade.cost.latency_profile(rows=...), cached), or for a single-sequence latency model passed in (q -> seconds),
    its time for rows * q tokens."""
    if latency is not None:
        return lambda q: latency(rows * q)
    return latency_profile(model, rows=rows)


def drafts_can_pay(rows_model: Callable[[float], float], rows: int) -> bool:
    """Whether drafting can pay at batch steps of `rows` rows (always True for one row), priced by rows_model (q ->
    seconds of a step of `rows` rows feeding q tokens each: `rows_latency`): a step feeding every row its last token
    and one draft token accepted with probability GOOD_DRAFT, plus each row's host work (`host_seconds`), against
    transformers' plain batched step."""
    if rows <= 1:
        return True
    drafting = (1 + GOOD_DRAFT) / (rows_model(2) + host_seconds(rows))  # tokens per row and second
    return drafting >= MIN_SPEEDUP / rows_model(1)


def host_seconds(rows: int) -> float:
    """Host work of a drafted step of `rows` rows beyond transformers' plain step: each row's drafting (HOST_S) and
    lade's loop (LOOP_S)."""
    return rows * (HOST_S + LOOP_S)


def plain_generate(model, input_ids: torch.Tensor, logits_processor, stopping_criteria, gen: GenerationConfig,
                   synced_gpus: bool, streamer, model_kwargs: dict):
    """The batch decoded by transformers' own loop, as `model.generate` would, its steps writing their KV in place
    (lade.cache.slotted); with return_dict_in_generate, lade's output type whose stats say so (`handed_over`, one
    token per row and forward). input_ids: [B, P]."""
    cache = model_kwargs.get(CACHE_KWARG)  # its batched steps write their KV in place, as lade's loop's do
    with slotted(cache) if cache is not None else nullcontext():
        out = type(model)._sample(model, input_ids, logits_processor=logits_processor,
                                  stopping_criteria=stopping_criteria, generation_config=gen,
                                  synced_gpus=synced_gpus, streamer=streamer, **model_kwargs)
    if not gen.return_dict_in_generate:
        return out
    new = out.sequences[:, input_ids.shape[1] :]  # [B, T]
    lengths = _row_lengths(new, eos_token_tensor(gen))
    rows = [_plain_stats(n) for n in lengths]
    output_type = LookaheadEncoderDecoderOutput if model.config.is_encoder_decoder else LookaheadDecoderOnlyOutput
    batch = LookaheadStats(handed_over=True)
    for t in range(new.shape[1]):
        batch.record_step(sum(n > t for n in lengths))
    return output_type(**dict(out.items()), lookahead_stats=batch, row_stats=rows if len(rows) > 1 else None)


def learned_rows(out, prompt_length: int, pads: list[int], gen: GenerationConfig) -> list[list[int]]:
    """What a corpus learns of a plain call's output (sequences [B, P + T] or an output holding them): each row's
    prompt without its left padding and its new tokens through its first EOS."""
    sequences = out if isinstance(out, torch.Tensor) else out.sequences
    lengths = _row_lengths(sequences[:, prompt_length:], eos_token_tensor(gen))
    return [row[pad : prompt_length + n].tolist() for row, pad, n in zip(sequences, pads, lengths)]


def _plain_stats(tokens: int) -> LookaheadStats:
    return LookaheadStats(accepted_per_step=[1] * tokens, handed_over=True)


def _row_lengths(new: torch.Tensor, eos: torch.Tensor | None) -> list[int]:
    """Tokens each row generated: through its first EOS, else all. new: [B, T]."""
    if eos is None or new.shape[1] == 0:
        return [new.shape[1]] * new.shape[0]
    hits = torch.isin(new, eos.to(new.device))  # [B, T]
    first = hits.int().argmax(1) + 1  # [B]
    return torch.where(hits.any(1), first, new.shape[1]).tolist()
