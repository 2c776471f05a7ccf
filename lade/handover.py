"""When "auto" hands a whole call to plain decoding: several rows per step (a batch, or the beams of beam search)
where no lookahead config is predicted to pay.

A step of R rows feeding q tokens each costs what the device takes for an [R, q] step: a batch's spare compute is
shared by its rows, so drafting is dearer than for one sequence. And lade's loop does more host work per row and step
than transformers' plain loop. So before any forward, "auto" with R > 1 prices every prior config with the model's
latency profile of R-row steps and lade's host work per row and step, HOST_S + LOOP_S (lade.cost.choose_config, the
rule auto uses for one sequence), at the compression expected of the batch's slowest row (`slowest_row_prior`: a
ragged batch steps until its slowest row is done, and a step of fewer rows costs nearly as much as a full one). Beam
search prices a step drafting the full tree under every beam at the replay expected before any was observed
(lade.beams.BeamPricing). When none gains MIN_SPEEDUP, the call runs through transformers' own loop
(`_sample` or `_beam_search`, what `model.generate` runs), so "auto" is not priced slower than plain decoding. One
sequence never hands over: its plain steps take the model's plain decoding path, and its adaptive drafts are sized
step by step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import torch
from transformers import GenerationConfig

from .beams import BeamPricing
from .compat import eos_token_tensor
from .cost import HOST_S, LOOP_S, choose_config, latency_profile
from .cost_prior import PRIOR
from .outputs import (
    LookaheadBeamDecoderOnlyOutput,
    LookaheadBeamEncoderDecoderOutput,
    LookaheadDecoderOnlyOutput,
    LookaheadEncoderDecoderOutput,
    LookaheadStats,
)


def rows_latency(model, rows: int, latency: Callable[[float], float] | None) -> Callable[[float], float]:
    """q -> seconds of a step of `rows` rows feeding q tokens each: the model's measured profile of rows-row steps
    (lade.cost.latency_profile(rows=...), cached), or for a single-sequence latency model passed in (q -> seconds),
    its time for rows * q tokens."""
    if latency is not None:
        return lambda q: latency(rows * q)
    return latency_profile(model, rows=rows)


def drafts_can_pay(rows_model: Callable[[float], float], rows: int, task: str, beam_budget: int | None = None) -> bool:
    """Whether any prior lookahead config is predicted to gain MIN_SPEEDUP at steps of `rows` rows (always True for
    one row), priced by rows_model (q -> seconds of a step of `rows` rows feeding q tokens each: `rows_latency`).
    Beam search (beam_budget: most tree nodes under one beam): whether a step feeding every beam its last token and a
    full tree is priced to pay over transformers' plain beam step."""
    host_s = rows * (HOST_S + LOOP_S)
    if beam_budget is not None:
        return BeamPricing(rows_model, host_s).drafts_pay(1 + beam_budget)
    if rows <= 1:
        return True
    return choose_config(rows_model, task, host_s=host_s, prior=slowest_row_prior(rows)).enabled


def slowest_row_prior(rows: int, prior: Mapping = PRIOR) -> dict:
    """The prior (task -> config -> (compression, step tokens, single share)) with each compression c replaced by the
    compression expected of the slowest of `rows` rows, 1 + (c - 1) / sqrt(rows): rows' extra tokens per step vary
    widely between prompts, and the batch steps until its slowest row is done (an empirical rule, checked against
    measured batches in the lab's batch notebook)."""
    return {task: {config: (1 + (c - 1) / math.sqrt(rows), q, single) for config, (c, q, single) in table.items()}
            for task, table in prior.items()}


def plain_generate(model, beams: bool, input_ids: torch.Tensor, logits_processor, stopping_criteria,
                   gen: GenerationConfig, synced_gpus: bool, streamer, model_kwargs: dict):
    """The call decoded by transformers' own loop, as `model.generate` would; with return_dict_in_generate, lade's
    output type whose stats say so (`handed_over`, one token per row and forward). input_ids: [B, P]."""
    method = type(model)._beam_search if beams else type(model)._sample
    extra = {} if beams else {"streamer": streamer}
    out = method(model, input_ids, logits_processor=logits_processor, stopping_criteria=stopping_criteria,
                 generation_config=gen, synced_gpus=synced_gpus, **extra, **model_kwargs)
    if not gen.return_dict_in_generate:
        return out
    new = out.sequences[:, input_ids.shape[1] :]  # [B * num_return_sequences, T]
    lengths = _row_lengths(new, eos_token_tensor(gen))
    rows = [_plain_stats(n) for n in lengths]
    fields = dict(out.items())
    if beams:
        output_type = LookaheadBeamEncoderDecoderOutput if model.config.is_encoder_decoder else \
            LookaheadBeamDecoderOnlyOutput
        return output_type(**fields, lookahead_stats=_plain_stats(new.shape[1]))
    output_type = LookaheadEncoderDecoderOutput if model.config.is_encoder_decoder else LookaheadDecoderOnlyOutput
    batch = LookaheadStats(handed_over=True)
    for t in range(new.shape[1]):
        batch.record_step(sum(n > t for n in lengths))
    return output_type(**fields, lookahead_stats=batch, row_stats=rows if len(rows) > 1 else None)


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
