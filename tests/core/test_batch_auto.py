"""Adaptive drafts sized for the whole batch (lade/drafters/allocation.py): one rule weighs every row's ranked draft
nodes against the latency of the batch's whole step (B rows padded to the widest), down to plain batched one-token
steps. Latency models are injected (lookahead_latency=, auto_config(latency=)); rows equal plain batched greedy."""

import random

import pytest
import torch

import lade
from lade import left_pad
from lade.drafters.allocation import MAX_REST, StepSizer, allocate
from lade.drafters.base import Draft, Offer
from lade.drafters.step_cost import StepCost
from tiny_models import COMMON, random_prompt, tiny_model

PAD = COMMON["pad_token_id"]
GREEDY = dict(do_sample=False, max_new_tokens=40, eos_token_id=None, pad_token_id=PAD)
FREE = lambda q: 1.0 + 1e-4 * q  # noqa: E731  (width nearly free: a memory-bound device)
STEEP = lambda q: 1.0 + 0.5 * q  # noqa: E731  (cost grows with the step's total width: a compute-bound device)


def fixed_auto(model, latency):
    """"auto" for this latency model, planning with the model alone (correct_latency=False: real timings of the tiny
    model never steer the test's decisions)."""
    return lade.auto_config(model, latency=latency, draft_options=dict(correct_latency=False))


def batch_of_four():
    prompts = [random_prompt(s, length=n, repeat=r)[0] for s, n, r in
               [(3, 30, True), (4, 20, False), (5, 26, True), (6, 14, False)]]
    return prompts, *left_pad(prompts, PAD)


def decode(model, ids, mask, config, latency, **kw):
    out = lade.generate(model, ids, config, lookahead_latency=latency, attention_mask=mask,
                        return_dict_in_generate=True, **{**GREEDY, **kw})
    return out.sequences, [stats.tree_nodes for stats in out.row_stats]


def slow_threshold_best(values, fixed, forward, host_s, margin):
    """By definition: every threshold t (each row feeds its nodes worth >= t), the batch's expected tokens
    (B + values fed) over forward(widest row) + host_s per drafting row; the plain step unless one beats it by
    margin, the highest threshold among equals."""
    rows = len(values)
    best, chosen = margin * rows / forward(max(fixed)), [0] * rows
    for t in sorted({v for row in values for v in row}, reverse=True):
        counts = [sum(v >= t for v in row) for row in values]
        width = max(f + c for f, c in zip(fixed, counts))
        rate = (rows + sum(v for row in values for v in row if v >= t)) / (forward(width) +
                                                                             host_s * sum(c > 0 for c in counts))
        if rate > best:
            best, chosen = rate, counts
    return chosen


@pytest.mark.parametrize("seed", range(30))
def test_allocation_feeds_the_best_threshold_across_rows(seed):
    """The rule takes nodes across rows in decreasing value, so its choice is a threshold per batch; over those it
    must keep the one with the most expected tokens per second of the padded step (distinct values: no ties)."""
    rng = random.Random(seed)
    rows = rng.randint(1, 6)
    pool = rng.sample(range(1, 10_000), 200)
    values = [sorted((pool.pop() / 10_000 for _ in range(rng.randint(0, 12))), reverse=True) for _ in range(rows)]
    fixed = [rng.choice([1, 1, 5]) for _ in range(rows)]
    slope = rng.choice([1e-4, 0.01, 0.05, 0.2, 1.0])
    forward = lambda width: 1.0 + slope * rows * width  # noqa: E731
    host_s, margin = rng.choice([0.0, 0.01]), rng.choice([1.0, 1.05])
    assert allocate(values, fixed, forward, host_s, margin) == slow_threshold_best(values, fixed, forward, host_s,
                                                                                   margin)


def test_allocation_down_to_plain_steps_and_one_row_alone():
    """Where an extra slot of width costs the batch more than any node can add (value <= 1 each), every row feeds
    its last token alone; the same nodes in a single row under a cheaper step pay."""
    values = [[0.9, 0.8, 0.5]] * 4
    linear = lambda width: 0.05 + 4 * width  # noqa: E731  (four rows: each slot of width is four tokens)
    assert allocate(values, [1] * 4, linear, margin=1.05) == [0, 0, 0, 0]
    assert allocate(values[:1], [1], lambda width: 1.0 + 0.1 * width, margin=1.05) == [3]


def test_the_step_time_corrects_the_cost_at_the_batch_width():
    """A timed batch step of B rows padded to Q tokens is B * Q tokens of work: the sizer's cost model learns it
    there (the first observation of a size class sets its correction), and sizes the next step with it."""
    sizer = StepSizer(StepCost(lambda q: 0.01 * q, host_s=0.0))
    sizer.observe(4 * 6, 0.48)  # twice what the latency model predicts for 24 tokens
    assert sizer.cost.forward_s(24) == pytest.approx(0.48)
    taken = []
    offers = [Offer([0.5], 1, lambda k: taken.append(k) or Draft(torch.empty(0, 0, dtype=torch.long)))] * 2
    sizer.drafts(offers)
    assert taken == [0, 0]  # a second slot doubles 2 tokens of work for at most 1 more token
    assert StepSizer(StepCost(lambda q: 0.01 * q, 0.0), correct=False).cost.log_ratio == {}


def test_a_batch_rests_from_planning_after_steps_that_fed_no_draft_and_one_row_never_does():
    """After k planned steps in a row that fed no node, a batch plans again only after min(2^(k-1), MAX_REST) resting
    steps; a planned step that drafts ends the back-off. One sequence plans every step."""
    def offers(value, rows=2):
        return [Offer([value], 1, lambda k: Draft(torch.empty(0, 0, dtype=torch.long), [(5,)] * k))] * rows

    def plans_until_planned(sizer):
        skipped = 0
        while not sizer.plans():
            skipped += 1
        return skipped

    sizer = StepSizer(StepCost(STEEP, host_s=0.0), correct=False)
    rests = []
    for _ in range(6):
        rests.append(plans_until_planned(sizer))
        sizer.drafts(offers(0.1))  # a node worth 0.1 never pays for two rows' wider step
    assert rests == [0, 1, 2, 4, 8, MAX_REST] and MAX_REST == 8
    plans_until_planned(sizer)
    assert [len(d.candidates) for d in sizer.drafts(offers(0.9))] == [1, 1]  # worth its slot: drafts, no rest
    assert sizer.plans() and sizer.plans()
    alone = StepSizer(StepCost(STEEP, host_s=0.0), correct=False)
    for _ in range(5):
        assert alone.plans()
        alone.drafts(offers(0.01, rows=1))


def test_nearly_free_width_makes_every_row_draft_at_batch_four():
    """When width costs almost nothing, a node with any acceptance chance pays for the batch: every row feeds draft
    trees (and accepts several tokens in some step); the rows still equal plain batched greedy."""
    model = tiny_model("llama")
    _, ids, mask = batch_of_four()
    out, nodes = decode(model, ids, mask, fixed_auto(model, FREE), FREE)
    assert torch.equal(out, model.generate(ids, attention_mask=mask, **GREEDY))
    assert all(sum(row) > 0 for row in nodes)


def test_width_priced_by_the_batch_drafts_less_than_rows_alone_down_to_plain_steps():
    """With a step's cost growing with its total width, a node that pays for one sequence (its slot costs one
    token of work) does not pay in a batch of four (the slot costs four, padding included): alone the rows draft,
    together every step is a plain batched one-token step; both equal plain greedy."""
    model = tiny_model("llama")
    prompts, ids, mask = batch_of_four()
    config = fixed_auto(model, STEEP)
    out, nodes = decode(model, ids, mask, config, STEEP)
    assert torch.equal(out, model.generate(ids, attention_mask=mask, **GREEDY))
    assert all(set(row) == {0} for row in nodes)
    alone = 0
    for p in prompts:
        one, [row] = decode(model, p[None], torch.ones(1, len(p), dtype=torch.long), config, STEEP)
        assert torch.equal(one, model.generate(p[None], attention_mask=torch.ones_like(p[None]), **GREEDY))
        alone += sum(row)
    assert alone > 0


def test_rows_with_different_acceptance_draft_different_amounts():
    """A row whose prompt already holds the loop the model settles into has high-value retrieved nodes; a fresh row
    has few: the batch feeds the first row's trees and leaves the other at its last token in the same step."""
    model = tiny_model("llama")
    start = random_prompt(3, length=30)
    looping = model.generate(start, attention_mask=torch.ones_like(start), **GREEDY)[0]
    ids, mask = left_pad([looping, random_prompt(7, length=20, repeat=False)[0]], PAD)
    latency = lambda q: 1.0 + 0.02 * q  # noqa: E731
    out, (loop_nodes, fresh_nodes) = decode(model, ids, mask, fixed_auto(model, latency), latency,
                                            max_new_tokens=24)
    assert torch.equal(out, model.generate(ids, attention_mask=mask, **dict(GREEDY, max_new_tokens=24)))
    shared = list(zip(loop_nodes, fresh_nodes))  # the steps both rows were in
    assert sum(a for a, _ in shared) > sum(b for _, b in shared)
    assert any(a > 0 and b == 0 for a, b in shared)


@pytest.mark.parametrize("latency", [FREE, STEEP, lambda q: 1.0 + 0.05 * q], ids=["free", "steep", "between"])
def test_sized_batches_equal_plain_batched_greedy_as_rows_finish(latency):
    """Rows end at different steps (EOS), so the batch the sizer prices shrinks; the latency model is corrected by
    the real step timings (correct_latency on), which may change every draft but never a token."""
    model = tiny_model("qwen2")
    _, ids, mask = batch_of_four()
    free = model.generate(ids, attention_mask=mask, **GREEDY)[:, ids.shape[1] :]
    eos = max(sorted(set(free[:, 1:].flatten().tolist())),
              key=lambda t: len({int((r == t).nonzero()[0]) if bool((r == t).any()) else -1 for r in free}))
    kw = dict(GREEDY, eos_token_id=eos)
    ref = model.generate(ids, attention_mask=mask, **kw)
    assert len({int((row != PAD).sum()) for row in ref[:, ids.shape[1] :]}) > 1, "rows must end at different steps"
    out = lade.generate(model, ids, "auto", lookahead_latency=latency, attention_mask=mask, **kw)
    assert torch.equal(out, ref)


def test_seeded_batch_sampling_is_the_same_whatever_the_sizing():
    """Each sampled token is decided by its (row, position) keyed noise, never by the drafts: batches sized by a
    free and by a width-priced latency model (very different trees), and plain one-token steps, sample the same."""
    model = tiny_model("llama")
    _, ids, mask = batch_of_four()
    kw = dict(do_sample=True, top_k=8, temperature=0.8)
    outs = []
    for latency in (FREE, STEEP):
        config = lade.auto_config(model, latency=latency, sampling_seed=5,
                                  draft_options=dict(correct_latency=False))  # the tiny model's timings never steer
        out, nodes = decode(model, ids, mask, config, latency, **kw)
        outs.append((out, sum(map(sum, nodes))))
    plain = lade.generate(model, ids, lade.LookaheadConfig(enabled=False, sampling_seed=5), attention_mask=mask,
                          **{**GREEDY, **kw})
    assert outs[0][1] > 0 and outs[1][1] == 0
    assert torch.equal(outs[0][0], outs[1][0]) and torch.equal(outs[0][0], plain)
