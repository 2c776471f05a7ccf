"""Cost model: latency interpolation, the automatic choice and its fallback, 'auto' end to end (the GPU cost
model of the research harness is tested in test_costmodel.py)."""

import pytest
import torch

import lade
from lade.cost import LatencyProfile, choose_config, latency_profile, predict, prior_table, step_latency
from tiny_models import random_prompt, tiny_model

# config key -> (compression, tokens fed per step, share of one-token steps)
FAKE_PRIOR = {
    "chat": {(3, 1, 2): (1.30, 5.0, 0.0), (4, 5, 5): (1.60, 25.0, 0.0)},
    "code": {(3, 1, 2): (1.50, 5.0, 0.0), (4, 5, 5): (1.80, 25.0, 0.0)},
}
CPU_LIKE = LatencyProfile("cpu", 256, (1, 5, 25), (0.040, 0.044, 0.070))  # extra tokens cost a lot
GPU_LIKE = LatencyProfile("gpu", 256, (1, 5, 25), (0.020, 0.020, 0.021))  # memory bound: extra tokens ~free


def test_latency_profile_interpolates_and_extrapolates():
    p = LatencyProfile("k", 256, (1, 5, 25), (0.04, 0.044, 0.07))
    assert p(5) == pytest.approx(0.044)
    assert p(15) == pytest.approx(0.044 + 10 * 0.026 / 20)
    assert p(45) == pytest.approx(0.07 + 20 * 0.026 / 20)  # past the last point: the last segment's slope
    assert LatencyProfile.from_json(p.to_json()) == p


def test_noisy_latency_profile_never_extrapolates_to_negative_latency():
    """A measurement whose last time dips (one noisy repeat) must not extrapolate to zero or negative latency: past
    the last point the slope is never negative."""
    p = LatencyProfile("k", 32, (1, 4, 16), (0.0020, 0.0030, 0.0010))
    assert p(16) == pytest.approx(0.0010) and p(53) == pytest.approx(0.0010)
    assert all(p(q) > 0 for q in range(1, 500))


def test_auto_picks_the_config_the_device_favours():
    """On the CPU-like device the small step wins (1.3*40/44 = 1.18 > 1.6*40/70 = 0.91); on the GPU-like
    device extra tokens are nearly free, so the large config's higher compression wins."""
    cpu = choose_config(CPU_LIKE, "chat", host_s=0.0, prior=FAKE_PRIOR)
    assert (cpu.ngram_size, cpu.window_size, cpu.guess_set_size, cpu.enabled) == (3, 1, 2, True)
    gpu = choose_config(GPU_LIKE, "chat", host_s=0.0, prior=FAKE_PRIOR)
    assert (gpu.ngram_size, gpu.window_size, gpu.guess_set_size) == (4, 5, 5)
    best = predict(CPU_LIKE, "mixed", host_s=0.0, prior=FAKE_PRIOR)[0]
    assert best.config == (3, 1, 2) and best.compression == pytest.approx(1.4)
    assert best.speedup == pytest.approx(1.4 * 0.040 / 0.044)


def test_step_mix_is_priced_step_by_step():
    """A pool-only config feeds one token when no candidate matches: 80% one-token steps and 20% 21-token steps
    (5 tokens on average) cost 0.8 * 40 + 0.2 * 70 ms, far less than five-token steps at 44 ms would suggest
    for the wide ones and more than latency(5) overall; the prior's single share makes auto pick it."""
    assert step_latency(CPU_LIKE, 5.0, 0.8) == pytest.approx(0.8 * 0.040 + 0.2 * CPU_LIKE(21))
    assert step_latency(CPU_LIKE, 5.0, 0.0) == pytest.approx(0.044)
    assert step_latency(CPU_LIKE, 1.0, 1.0) == pytest.approx(0.040)
    prior = {task: dict(table) for task, table in FAKE_PRIOR.items()}
    prior["chat"][(8, 0, 2, 16, 2)] = (1.28, 1.6, 0.95)  # hardly ever speculates on chat: near plain cost
    chosen = choose_config(CPU_LIKE, "chat", host_s=0.0, prior=prior)
    assert chosen.key == (8, 0, 2, 16, 2) and chosen.window_size == 0 and chosen.pool_match_tokens == 2


def test_measured_prior_picks_pool_only_on_this_cpu_and_a_window_where_tokens_are_free():
    """With the shipped prior: this CPU's measured profile (1 thread; a 4-token step costs 1.5x a 1-token step)
    gets the pool-only config, and no config at all for chat; a memory-bound profile gets a wide window."""
    cpu = LatencyProfile("cpu", 256, (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64),
                         (0.0569, 0.0959, 0.1177, 0.0845, 0.098, 0.1021, 0.1147, 0.1224, 0.1473, 0.172, 0.225, 0.2789))
    assert choose_config(cpu, "mixed").window_size == 0 and choose_config(cpu, "code").pool_match_tokens == 2
    assert choose_config(cpu, "chat").enabled is False
    flat = LatencyProfile("gpu", 256, (1, 64), (0.020, 0.0215))
    assert choose_config(flat, "mixed").window_size >= 5


def test_auto_falls_back_to_plain_decoding_when_nothing_wins():
    """Steps of 5 tokens cost 1.5x a single token here: 1.3 / 1.5 < 1, so auto must disable lookahead."""
    slow = LatencyProfile("slow", 256, (1, 5, 25), (0.040, 0.060, 0.200))
    cfg = choose_config(slow, "chat", host_s=0.0, prior=FAKE_PRIOR)
    assert cfg.enabled is False
    assert choose_config(CPU_LIKE, "chat", min_speedup=1.5, prior=FAKE_PRIOR).enabled is False


def test_prior_tasks():
    assert prior_table("mixed", FAKE_PRIOR)[(3, 1, 2)] == pytest.approx((1.4, 5.0, 0.0))
    with pytest.raises(ValueError, match="task must be one of"):
        prior_table("poetry", FAKE_PRIOR)


def test_disabled_config_is_plain_greedy():
    """enabled=False decodes one token per step through the lookahead loop, output equal to plain greedy."""
    model = tiny_model("llama")
    ids = random_prompt(3)
    kw = dict(do_sample=False, max_new_tokens=20, eos_token_id=None)
    out, stats = lade.generate(model, ids, lade.LookaheadConfig(enabled=False), return_stats=True, **kw)
    assert torch.equal(out, model.generate(ids, attention_mask=torch.ones_like(ids), **kw))
    assert stats.accepted_per_step == [1] * 20


def test_auto_end_to_end(tmp_path, monkeypatch):
    """lookahead_config='auto' measures the tiny model once (cached as JSON), chooses, and stays exact."""
    monkeypatch.setenv("LADE_CACHE", str(tmp_path))
    model = tiny_model("qwen2")
    profile = latency_profile(model, qs=(1, 4, 16), context=32, repeats=1)  # measured and cached
    assert profile.qs == (1, 4, 16) and all(s > 0 for s in profile.seconds)
    ids = random_prompt(5)
    kw = dict(do_sample=False, max_new_tokens=16, eos_token_id=None)
    out = lade.generate(model, ids, "auto", **kw)
    assert torch.equal(out, model.generate(ids, attention_mask=torch.ones_like(ids), **kw))
    files = list((tmp_path / "cost").glob("latency-*.json"))
    assert len(files) == 1
    assert latency_profile(model) == profile == LatencyProfile.from_json(files[0].read_text())  # from the cache
    assert isinstance(lade.auto_config(model), lade.LookaheadConfig)
    with pytest.raises(ValueError, match="'auto'"):
        lade.generate(model, ids, "fast", **kw)
