"""lade.pricing (the one rule of whether drafting pays) and lade.profile (step costs at every row count)."""

import pytest
import torch

import lade
from lade.cost import LatencyProfile
from lade.pricing import THRESHOLD, Costs, Plan, pays, speedup, step_seconds
from lade.profile import PROFILE_ROWS, RowsLatency, device_costs
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


def test_once_profiled_a_new_batch_size_measures_nothing(tmp_path, monkeypatch):
    """The first "auto" call measures the profiles of every PROFILE_ROWS count (cached); later calls at batch sizes
    never seen read them and measure nothing (no file is added or rewritten), and stay exact."""
    monkeypatch.setenv("LADE_CACHE", str(tmp_path))
    model = tiny_model("llama", "sdpa")
    kw = dict(do_sample=False, max_new_tokens=8, eos_token_id=None, pad_token_id=0)
    ids = random_prompt(3, length=10)
    lade.generate(model, ids, "auto", **kw)
    files = {path: path.stat().st_mtime_ns for path in (tmp_path / "cost").glob("latency-*.json")}
    assert len(files) == len(PROFILE_ROWS)
    for size in (3, 8):
        batch, mask = lade.left_pad([random_prompt(s, length=6 + s)[0] for s in range(size)], 0)
        out = lade.generate(model, batch, "auto", attention_mask=mask, **kw)
        assert torch.equal(out, model.generate(batch, attention_mask=mask, **kw))
    assert {path: path.stat().st_mtime_ns for path in (tmp_path / "cost").glob("latency-*.json")} == files
