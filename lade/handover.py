"""When "auto" hands a whole call to plain decoding: a batch where no draft is priced to pay.

A step of R rows feeding q tokens each costs what the device takes for an [R, q] step: a batch's spare compute is
shared by its rows, so drafting is dearer than for one sequence. And a static batch ends with its slowest row: its
forwards are that row's steps, however far the others got. Before any forward, "auto" with R > 1 rows asks whether
drafting can pay at all: the task's compression prior (lade.cost.predict), as the batch's slowest row would see it
(`slowest_row_prior`), priced by lade.pricing against transformers' plain batched step with the device's measured
costs of R-row steps (lade.profile.device_costs: the forward, each row's drafting host work and lade's loop's work
beyond transformers' loop), must pay with some config. Where it can, lade's loop runs and sizes every step for the batch
(lade/drafters/allocation.py: drafts only where they pay, plain batched steps otherwise, resting from planning while
nothing pays); where it cannot, the call runs through transformers' own loop (`_sample`, what `model.generate`
runs), its steps writing their KV in place as in lade's own loop (lade.cache.slotted). One sequence never hands
over: its plain steps take the model's plain decoding path, and its adaptive drafts are sized step by step. Beam
search never hands over either: its own loop prices every step (lade.beams.BeamPricing), and its undrafted steps
cost no more than transformers' beam steps, which copy every beam's whole cache twice per step (lade.beams).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import nullcontext

import torch
from transformers import GenerationConfig

from .cache import slotted
from .compat import CACHE_KWARG, eos_token_tensor, plain_sample
from .cost import predict
from .cost_prior import PRIOR
from .outputs import LookaheadStats, output_type
from .pricing import Costs, pays
from .rows import row_lengths


def drafts_can_pay(costs: Costs, rows: int, task: str = "mixed", priced: Sequence[int] = ()) -> bool:
    """Whether drafting can pay at batch steps of `rows` rows (always True for one row): `batch_speedup` pays
    (lade.pricing.pays). priced: row counts whose costs are known without measuring (lade.profile.cached_rows);
    where drafting cannot pay at one of them below `rows`, it cannot at `rows` either (each more row keeps less of
    the slowest row's gain and widens the step), so the call hands over without pricing its own row count, which
    may need a profile not yet measured."""
    if rows <= 1:
        return True
    if any(1 < known < rows and not pays(batch_speedup(costs, known, task)) for known in priced):
        return False
    return pays(batch_speedup(costs, rows, task))


def batch_speedup(costs: Costs, rows: int, task: str = "mixed") -> float:
    """Predicted speedup of a static batch of `rows` rows drafting over transformers' plain batched steps
    (lade.pricing, handed over), with the best config of the task's compression prior as its slowest row sees it
    (`slowest_row_prior`)."""
    return predict(costs, task, prior=slowest_row_prior(rows), rows=rows, handed_over=True)[0].speedup


def slowest_row_prior(rows: int, prior: Mapping = PRIOR) -> dict:
    """The compression prior (lade.cost_prior.PRIOR's layout) of the slowest of `rows` rows in one batch
    (`slowest_row`), each config feeding as many tokens per row and step on average."""
    def slowest(c: float, tokens: float, single: float) -> tuple[float, float, float]:
        c, single = slowest_row(c, single, rows)
        return c, tokens, single

    return {task: {key: slowest(*entry) for key, entry in table.items()} for task, table in prior.items()}


def slowest_row(compression: float, single_share: float, rows: int) -> tuple[float, float]:
    """(compression, share of one-token steps) of the slowest of `rows` rows decoding with a config whose rows
    compress `compression` on average: its rows spread evenly from 1 (no draft accepted) to 2c - 1, so the slowest of
    R keeps 2 / (R + 1) of the mean's gain (the expected least of R uniform draws); a batch step feeds one token per
    row only where every row would (rows independent: single_share ** R)."""
    return 1 + 2 * (compression - 1) / (rows + 1), single_share**rows


def plain_generate(model, input_ids: torch.Tensor, logits_processor, stopping_criteria, gen: GenerationConfig,
                   synced_gpus: bool, streamer, model_kwargs: dict, cache_outlives: bool):
    """The batch decoded by transformers' own loop, as `model.generate` would, its steps writing their KV in place
    (lade.cache.slotted); with return_dict_in_generate, lade's output type whose stats say so (`handed_over`, one
    token per row and forward). input_ids: [B, P]; cache_outlives: whether the cache outlives the call (compacted
    at its end, lade.cache.outlives_call)."""
    cache = model_kwargs.get(CACHE_KWARG)  # its batched steps write their KV in place, as lade's loop's do
    with slotted(cache, cache_outlives) if cache is not None else nullcontext():
        out = plain_sample(model, input_ids, logits_processor=logits_processor, stopping_criteria=stopping_criteria,
                           generation_config=gen, synced_gpus=synced_gpus, streamer=streamer, **model_kwargs)
    if not gen.return_dict_in_generate:
        return out
    new = out.sequences[:, input_ids.shape[1] :]  # [B, T]
    lengths = row_lengths(new, eos_token_tensor(gen))
    rows = [_plain_stats(n) for n in lengths]
    batch = LookaheadStats(handed_over=True)
    for t in range(new.shape[1]):
        batch.record_step(sum(n > t for n in lengths))
    return output_type(model)(**dict(out.items()), lookahead_stats=batch, row_stats=rows if len(rows) > 1 else None)


def learned_rows(out, prompt_length: int, pads: list[int], gen: GenerationConfig) -> list[list[int]]:
    """What a corpus learns of a plain call's output (sequences [B, P + T] or an output holding them): each row's
    prompt without its left padding and its new tokens through its first EOS."""
    sequences = out if isinstance(out, torch.Tensor) else out.sequences
    lengths = row_lengths(sequences[:, prompt_length:], eos_token_tensor(gen))
    return [row[pad : prompt_length + n].tolist() for row, pad, n in zip(sequences, pads, lengths)]


def _plain_stats(tokens: int) -> LookaheadStats:
    return LookaheadStats(accepted_per_step=[1] * tokens, handed_over=True)
