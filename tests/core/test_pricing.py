"""lade.pricing (the one rule of whether drafting pays) and lade.profile (step costs at every row count)."""

import pytest
import torch

import lade
from lade.cost import CONTEXT, LatencyProfile, device_key
from lade.pricing import THRESHOLD, Costs, Plan, pays, speedup, step_seconds
from lade.profile import ContextLatency, RowsLatency, cached_rows, device_costs
from lade.profile_cache import is_cached, latency_profile
from tiny_models import random_prompt, tiny_model

LINEAR = Costs(lambda rows, q: 0.01 + 0.001 * rows * q, host_s=0.002, loop_s=0.001)


def test_the_formula():
    """speedup = (accepted / R) * forward(R, q0) / (forward(R, q) + D * host_s + R * loop_s * L), by hand."""
    plan = Plan(rows=4, tokens=5, accepted=8, drafting=3, handed_over=True)
    step = 0.01 + 0.001 * 20 + 3 * 0.002 + 4 * 0.001
    assert step_seconds(LINEAR, plan) == pytest.approx(step)
    assert speedup(LINEAR, plan) == pytest.approx(2 * (0.01 + 0.004) / step)
    inside = Plan(rows=4, tokens=5, accepted=8, drafting=3)  # against lade's own plain step: no loop cost
    assert speedup(LINEAR, inside) == pytest.approx(2 * 0.014 / (step - 0.004))


def test_a_step_mix_and_the_plain_step_it_is_weighed_against():
    """A share s of one-token steps, the rest wide enough to feed `tokens` per step on average; a plain step that
    feeds a window anyway (q0 > 1) is dearer, so the same plan gains more against it."""
    mix = Plan(tokens=4.0, accepted=2.0, single_share=0.5, drafting=0)
    assert step_seconds(LINEAR, mix) == pytest.approx(0.5 * 0.011 + 0.5 * (0.01 + 0.001 * 7))
    assert speedup(LINEAR, Plan(tokens=6, accepted=2, plain_tokens=3)) > speedup(LINEAR, Plan(tokens=6, accepted=2))


def test_one_threshold_strictly():
    assert not pays(THRESHOLD) and pays(THRESHOLD + 1e-9) and not pays(1.5, threshold=1.5)
    plain = Plan(rows=2, tokens=1, accepted=2, drafting=0)
    assert speedup(LINEAR, plain) == pytest.approx(1.0) and not pays(speedup(LINEAR, plain))


def test_rows_are_interpolated_between_measured_counts_and_never_cheaper_with_more():
    """An [R, q] step between two measured row counts is priced on the line between them; past the last, with the
    last segment's slope; a profile timed faster at more rows (noise) never prices more rows cheaper."""
    one = LatencyProfile("k", 32, (1, 8), (1.0, 2.0))
    four = LatencyProfile("k", 32, (1, 8), (2.0, 5.0))
    sixteen = LatencyProfile("k", 32, (1, 8), (6.0, 17.0))
    rows = RowsLatency((1, 4, 16), (one, four, sixteen))
    assert rows(4, 1) == pytest.approx(2.0) and rows(8, 1) == pytest.approx(2.0 + 4 / 12 * 4.0)
    assert rows(2, 8) == pytest.approx(2.0 + 1 / 3 * 3.0)
    assert rows(32, 1) == pytest.approx(6.0 + 16 * 4.0 / 12)
    dip = RowsLatency((1, 4), (one, LatencyProfile("k", 32, (1, 8), (0.5, 1.0))))
    assert dip(4, 1) == pytest.approx(1.0) and dip(2, 8) == pytest.approx(2.0)


def test_a_latency_model_passed_in_carries_its_own_host_work():
    profile = LatencyProfile("k", 32, (1, 8), (1.0, 2.0), host_s=0.003, loop_s=0.001)
    costs = device_costs(None, profile)
    assert (costs.host_s, costs.loop_s) == (0.003, 0.001) and costs.forward(2, 4) == pytest.approx(2.0)
    plain = device_costs(None, lambda q: 1.0)
    assert (plain.host_s, plain.loop_s) == (0.0, 0.0)


def test_row_profiles_load_when_a_price_first_needs_them():
    """A lazy RowsLatency loads the one-row profile alone for one row, and for R rows every count up to the first
    measured count at or above R (past the last: all of them), each once."""
    loaded = []

    def source(rows):
        return lambda: loaded.append(rows) or LatencyProfile("k", 32, (1, 8), (1.0 * rows, 2.0 * rows))

    lazy = RowsLatency((1, 4, 16), [source(r) for r in (1, 4, 16)], lazy=True)
    assert lazy(1, 8) == pytest.approx(2.0) and loaded == [1]
    assert lazy(3, 1) == pytest.approx(1.0 + 2 / 3 * 3.0) and lazy(4, 8) == pytest.approx(8.0) and loaded == [1, 4]
    assert lazy(8, 1) == pytest.approx(4.0 + 4 / 12 * 12.0) and loaded == [1, 4, 16]
    assert lazy(32, 1) == pytest.approx(16.0 + 16 * 12.0 / 12) and loaded == [1, 4, 16]


def fake_measure(free: bool):
    """A stand-in for lade.cost.measure_latency (no timing): [R, q] steps nearly free, or dear, in R * q."""
    def measure(model, qs=(1, 2, 4, 8, 16, 32, 64), rows=1, **_):
        slope = 1e-4 if free else 0.5
        return LatencyProfile(device_key(model, rows), 64, tuple(qs), tuple(1.0 + slope * rows * q for q in qs))

    return measure


@pytest.mark.parametrize("free", [False, True])
def test_profiles_are_measured_when_first_needed_and_larger_batches_after_a_handover_need_none(
        tmp_path, monkeypatch, free):
    """One sequence measures the one-row profile alone; a batch of 3 the four-row one too. Where drafting cannot pay
    at 4 rows, a batch of 8 hands over without measuring the 16-row profile (it cannot pay at more rows either);
    where it can, the 16-row profile is measured (once). Every output is plain greedy's."""
    monkeypatch.setenv("LADE_CACHE", str(tmp_path))
    measured = []

    def profile(model, refresh=False, rows=1):
        measure = fake_measure(free)
        return latency_profile(model, refresh=refresh, rows=rows,
                               measure=lambda *a, **kw: measured.append(rows) or measure(*a, **kw))

    monkeypatch.setattr(lade.profile, "latency_profile", profile)
    model = tiny_model("llama", "sdpa")
    kw = dict(do_sample=False, max_new_tokens=8, eos_token_id=None, pad_token_id=0, return_dict_in_generate=True)
    lade.generate(model, random_prompt(3, length=10), "auto", **kw)
    assert measured == [1] and cached_rows(model) == (1,)
    for size, handed_over, expected in ((3, not free, [1, 4]), (8, not free, [1, 4] + [16] * free),
                                        (12, not free, [1, 4] + [16] * free)):
        batch, mask = lade.left_pad([random_prompt(s, length=6 + s)[0] for s in range(size)], 0)
        out = lade.generate(model, batch, "auto", attention_mask=mask, **kw)
        assert torch.equal(out.sequences, model.generate(batch, attention_mask=mask, **kw).sequences)
        assert out.lookahead_stats.handed_over == handed_over and measured == expected


def test_the_price_rises_with_context():
    """A step at context c costs the short profile's (measured at c0) plus, per row, the long profile's extra over
    it (measured at c1) scaled by (c - c0) / (c1 - c0): the short price at c0, the long one at c1 (one row), past c1
    extrapolated with the same slope; each row adds its own extra; the extra never falls with q."""
    short = LatencyProfile("k", 256, (1, 8), (1.0, 2.0))
    long = LatencyProfile("k", 2048, (1, 8), (1.5, 3.5))
    loaded = []

    def at(context):
        return ContextLatency(lambda rows, q: rows * short(q), short, lambda: loaded.append(1) or long, context)

    assert at(256)(1, 8) == pytest.approx(2.0) and at(2048)(1, 8) == pytest.approx(3.5)
    assert at(2048)(1, 1) == pytest.approx(1.5) and at(3840)(1, 8) == pytest.approx(5.0)
    assert at(1152)(4, 8) == pytest.approx(4 * 2.0 + 4 * 0.75)
    prices = [at(c)(2, 4) for c in (256, 512, 1024, 2048, 4096)]
    assert all(a < b for a, b in zip(prices, prices[1:]))
    dip = ContextLatency(lambda rows, q: short(q), short, lambda: LatencyProfile("k", 2048, (1, 8), (2.0, 2.5)), 2048)
    assert dip(1, 8) == pytest.approx(2.0 + 0.5)  # extra 1.0 at q=1 and 0.5 at q=8: never more for fewer tokens
    linear = Costs(at(2048), 0.0)
    plan = Plan(tokens=8, accepted=2, drafting=0)
    assert speedup(linear, plan) < speedup(Costs(at(256), 0.0), plan)  # long contexts make wide steps dearer


def context_measure(measured: list):
    """A stand-in for lade.cost.measure_latency (no timing) whose steps cost more at a longer context; records each
    measurement's (rows, long)."""
    def measure(model, qs=(1, 2, 4, 8, 16, 32, 64), rows=1, context=256, long=False, **_):
        measured.append((rows, long))
        return LatencyProfile(device_key(model, rows, long), context, tuple(qs),
                              tuple(1.0 + 1e-3 * rows * q * context / 256 for q in qs))

    return measure


def test_a_long_call_measures_the_long_context_profile_once(tmp_path, monkeypatch):
    """A call whose mean context (prompt plus half its new tokens) is past STRETCH x the profile's is priced at its
    context: the first such call measures the one-row profile at the long context, later ones read it from the
    cache; short calls never measure it. Every output is plain greedy's."""
    monkeypatch.setenv("LADE_CACHE", str(tmp_path))
    measured = []
    measure = context_measure(measured)

    def profile(model, refresh=False, rows=1, long=False):
        return latency_profile(model, refresh=refresh, rows=rows, long=long, measure=measure)

    monkeypatch.setattr(lade.profile, "latency_profile", profile)
    model = tiny_model("llama", "sdpa")
    kw = dict(do_sample=False, max_new_tokens=8, eos_token_id=None)
    short = random_prompt(1, length=12)
    assert torch.equal(lade.generate(model, short, "auto", **kw), model.generate(short, **kw))
    assert measured == [(1, False)] and not is_cached(model, long=True)
    long = random_prompt(2, length=2 * CONTEXT + 40)
    for _ in range(2):
        assert torch.equal(lade.generate(model, long, "auto", **kw), model.generate(long, **kw))
        assert measured == [(1, False), (1, True)] and is_cached(model, long=True)
    costs = device_costs(model, context=2 * CONTEXT + 44)
    assert costs.forward(1, 8) > device_costs(model).forward(1, 8) and measured == [(1, False), (1, True)]
