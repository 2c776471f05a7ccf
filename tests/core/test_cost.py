"""Cost model: latency interpolation, the automatic choice and its fallback, 'auto' end to end (the GPU cost
model of the research harness is tested in test_costmodel.py)."""

import json
import os
import threading
import warnings

import numpy as np
import pytest
import torch

import lade
from lade.cost import LatencyProfile, ProfileError, choose_config, predict, prior_table, step_latency
from lade.profile import PROFILE_ROWS, cached_rows
from lade.profile_cache import latency_profile, profile_path, read_profile
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


def test_latency_is_non_decreasing_in_tokens_fed():
    """A one-token step timed above a two-token one (noise) counts as the two-token step's time: a wider step is
    never priced cheaper than a narrower one, so no draft looks better than free."""
    p = LatencyProfile("k", 256, (1, 2, 3, 4, 8), (0.076, 0.065, 0.070, 0.068, 0.090))
    assert p(1) == p(2) == pytest.approx(0.065) and p(3) == p(4) == pytest.approx(0.068)
    assert all(p(q) <= p(q + 0.5) for q in np.arange(1, 40, 0.5))


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


def test_auto_chooses_only_configs_the_strategy_can_run():
    """Lookahead parallelism shards the window across ranks, so "auto" there chooses among configs with no window or
    one of at least a column per rank: where both configs gain (1.3*40/41 = 1.27x, 1.6*40/52 = 1.23x), the favourite
    (3,1,2) has one column, so two ranks get the next fastest, (4,5,5), never a refusal; nothing allowed: plain."""
    from lade.distributed.checks import check_shardable

    def two_ranks(config):
        try:
            check_shardable(config, 2)
        except ValueError:
            return False
        return True

    both_gain = LatencyProfile("mid", 256, (1, 5, 25), (0.040, 0.041, 0.052))
    assert choose_config(both_gain, "chat", host_s=0.0, prior=FAKE_PRIOR).key == (3, 1, 2)
    assert choose_config(both_gain, "chat", host_s=0.0, prior=FAKE_PRIOR, allowed=two_ranks).key == (4, 5, 5)
    assert choose_config(both_gain, "chat", host_s=0.0, prior=FAKE_PRIOR, allowed=lambda c: False).enabled is False


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
    gets no Jacobi window for any task (a pool-only config, or none where no config gains enough: whether chat
    clears the margin depends on the prompts the prior was measured on); a memory-bound profile gets a wide
    window."""
    cpu = LatencyProfile("cpu", 256, (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64),
                         (0.0569, 0.0959, 0.1177, 0.0845, 0.098, 0.1021, 0.1147, 0.1224, 0.1473, 0.172, 0.225, 0.2789))
    assert choose_config(cpu, "mixed").window_size == 0 and choose_config(cpu, "code").pool_match_tokens == 2
    chat = choose_config(cpu, "chat")
    assert chat.enabled is False or (chat.window_size == 0 and chat.pool_match_tokens == 2)
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
    """lookahead_config='auto' measures the tiny model once (cached as JSON, the one-row profile with its host work:
    one sequence prices no batch, so no other row count is measured), chooses, and stays exact."""
    monkeypatch.setenv("LADE_CACHE", str(tmp_path))
    model = tiny_model("qwen2")
    profile = latency_profile(model, qs=(1, 4, 16), context=32, repeats=3)  # measured and cached
    assert profile.qs == (1, 4, 16) and all(s > 0 for s in profile.seconds)
    ids = random_prompt(5)
    kw = dict(do_sample=False, max_new_tokens=16, eos_token_id=None)
    out = lade.generate(model, ids, "auto", **kw)
    assert torch.equal(out, model.generate(ids, attention_mask=torch.ones_like(ids), **kw))
    files = list((tmp_path / "cost").glob("latency-*.json"))
    assert len(files) == 1 and cached_rows(model) == PROFILE_ROWS[:1]
    assert latency_profile(model) == profile == read_profile(profile_path(model))  # from the cache
    assert profile.host_s > 0 and profile.loop_s > 0
    assert isinstance(lade.auto_config(model), lade.LookaheadConfig)
    with pytest.raises(ValueError, match="'auto'"):
        lade.generate(model, ids, "fast", **kw)




class FixedMeasurement:
    """Injected in place of measure_latency in the cache tests: a usable profile of the model, timing nothing (a
    real measurement on a loaded machine can stay too noisy to cache, which is not what these tests are about);
    counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, model, **kwargs) -> LatencyProfile:
        self.calls += 1
        return LatencyProfile(lade.cost.device_key(model), 32, (1, 4, 16), (0.001, 0.0012, 0.002))


GOOD = {"key": "k", "context": 32, "qs": [1, 4, 16], "seconds": [0.001, 0.0012, 0.002], "host_s": 0.001,
        "loop_s": 0.0005}
DAMAGED = {  # what a cache file may hold instead of a profile -> words the warning must contain
    "corrupt JSON": ("{'key': oops", "not valid JSON"),
    "truncated JSON": (json.dumps(GOOD)[:30], "not valid JSON"),
    "deeply nested JSON": ("[" * 100_000 + "]" * 100_000, "not valid JSON"),
    "not UTF-8": (b'{"key": "\xff"}', "not valid JSON"),
    "not an object": ("[1, 2, 3]", "expected the fields"),
    "a missing field": (json.dumps({k: v for k, v in GOOD.items() if k != "seconds"}), "expected the fields"),
    "an older format (no host work)": (json.dumps({k: v for k, v in GOOD.items() if k not in lade.cost.HOST_FIELDS}),
                                       "expected the fields"),
    "negative host work": (json.dumps(GOOD | {"host_s": -0.001}), "finite non-negative seconds"),
    "strings for numbers": (json.dumps(GOOD | {"seconds": ["0.001", "0.0012", "0.002"]}), "list of numbers"),
    "a string context": (json.dumps(GOOD | {"context": "32"}), "context an integer"),
    "fractional qs": (json.dumps(GOOD | {"qs": [1, 4.5, 16]}), "whole token counts"),
    "empty lists": (json.dumps(GOOD | {"qs": [], "seconds": []}), "one time per step size"),
    "mismatched lists": (json.dumps(GOOD | {"seconds": [0.001, 0.002]}), "one time per step size"),
    "negative timings": (json.dumps(GOOD | {"seconds": [-0.001, -0.0012, -0.002]}), "finite and positive"),
    "zero timings": (json.dumps(GOOD | {"seconds": [0.0, 0.0, 0.0]}), "finite and positive"),
    "NaN timings": (json.dumps(GOOD | {"seconds": [float("nan"), 0.0012, 0.002]}), "finite and positive"),
    "inverted timings": (json.dumps(GOOD | {"seconds": [0.002, 0.0012, 0.001]}), "under 0.6 x the 1-token step"),
    "decreasing qs": (json.dumps(GOOD | {"qs": [16, 4, 1]}), "not positive and increasing"),
    "a dip to nothing": (json.dumps(GOOD | {"qs": [1, 4, 16, 32], "seconds": [0.001, 0.0002, 0.002, 0.003]}),
                         "a 4-token step is timed at 0.0002 s"),
}


def _one_warning(record) -> str:
    messages = [str(w.message) for w in record if issubclass(w.category, UserWarning)]
    assert len(messages) == 1, messages
    return messages[0]


def _within(seconds: float, call):
    """call() in a thread, its result or exception; fails (instead of hanging the suite) if it does not return in
    time."""
    result = {}

    def run():
        try:
            result["value"] = call()
        except Exception as error:  # handed to the caller
            result["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "hung"
    if "error" in result:
        raise result["error"]
    return result["value"]


@pytest.mark.parametrize("damage", DAMAGED)
def test_a_damaged_latency_cache_is_ignored_with_one_warning_and_measured_again(damage, tmp_path):
    """Each damaged file is refused on read for its reason (one warning naming the file and why), the profile is
    measured again and the file replaced by it, so the next call reads it without a warning."""
    model = tiny_model("llama")
    path = profile_path(model, tmp_path)
    path.parent.mkdir(parents=True)
    content = DAMAGED[damage][0]
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content.replace('"k"', json.dumps(lade.cost.device_key(model))))
    measure = FixedMeasurement()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        profile = latency_profile(model, tmp_path, measure=measure)
    message = _one_warning(record)
    assert str(path) in message and DAMAGED[damage][1] in message and "measured the profile again" in message
    assert measure.calls == 1 and profile == FixedMeasurement()(model)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert latency_profile(model, tmp_path, measure=measure) == profile == read_profile(path)
    assert measure.calls == 1  # the second call read the file


@pytest.mark.parametrize("kind", ["a directory", "a FIFO"])
def test_a_cache_file_that_is_not_a_file_is_a_warning_never_a_hang(kind, tmp_path):
    """A directory or a FIFO where the profile file belongs: read_profile refuses it without blocking (a FIFO opened
    for reading would wait for a writer), the profile is measured and returned with one warning; a FIFO is replaced
    by the profile, a directory cannot be, which the same warning says."""
    model = tiny_model("llama")
    path = profile_path(model, tmp_path)
    path.parent.mkdir(parents=True)
    if kind == "a directory":
        path.mkdir()
    else:
        if not hasattr(os, "mkfifo"):
            pytest.skip("no FIFOs on this system")
        os.mkfifo(path)
    with pytest.raises(ProfileError, match="a directory" if kind == "a directory" else "not a regular file"):
        _within(30, lambda: read_profile(path))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        profile = _within(120, lambda: latency_profile(model, tmp_path, measure=FixedMeasurement()))
    message = _one_warning(record)
    assert str(path) in message and profile is not None and profile.qs == (1, 4, 16)
    if kind == "a directory":
        assert "could not cache the latency profile" in message and path.is_dir()
    else:
        assert read_profile(path) == profile
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # measured once: the next call (auto calls twice per generate) is silent
        assert latency_profile(model, tmp_path) == profile


def test_the_cache_is_written_through_a_private_temporary_file(tmp_path):
    """A link planted at the name the profile used to be written through (and at any name the writer could
    predict) is never followed: its target keeps its content, the profile lands in its own file, no temporary file
    is left behind."""
    model = tiny_model("llama")
    path = profile_path(model, tmp_path)
    path.parent.mkdir(parents=True)
    target = tmp_path / "victim.txt"
    target.write_text("precious")
    planted = [path.with_suffix(f".{os.getpid()}.partial"), path.with_suffix(".tmp"), path.with_suffix(".partial")]
    for link in planted:
        link.symlink_to(target)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        profile = latency_profile(model, tmp_path, measure=FixedMeasurement())
    assert target.read_text() == "precious" and read_profile(path) == profile
    assert not path.is_symlink() and (path.stat().st_mode & 0o077) == 0  # a private file, renamed into place
    assert sorted(p.name for p in path.parent.iterdir()) == sorted([path.name, *(p.name for p in planted)])


def test_a_cache_path_that_is_not_a_writable_folder_is_a_warning(tmp_path):
    """The lade cache is a file (or a folder the user cannot write): the measured profile is used, one warning."""
    model = tiny_model("llama")
    not_a_folder = tmp_path / "a-file"
    not_a_folder.write_text("not a folder")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        profile = latency_profile(model, not_a_folder, measure=FixedMeasurement())
    assert "could not cache the latency profile" in _one_warning(record) and profile.qs == (1, 4, 16)
    assert not_a_folder.read_text() == "not a folder"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert latency_profile(model, not_a_folder) is profile  # kept in memory: neither measured nor warned again


def test_a_profile_for_another_key_is_measured_again(tmp_path):
    """A valid profile of another model or device at this model's file (copied or edited) is not used."""
    model = tiny_model("llama")
    path = profile_path(model, tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(GOOD))
    with pytest.warns(UserWarning, match="holds the profile of 'k'\\) and measured the profile again"):
        profile = latency_profile(model, tmp_path, measure=FixedMeasurement())
    assert profile.key == lade.cost.device_key(model) and read_profile(path) == profile


def test_monotone_enough_accepts_real_profiles_and_refuses_reversed_ones():
    """A CPU profile whose 4-token step is timed under its 3-token one (a kernel change, 0.72x), a flat memory-bound
    profile whose last time is 1% under its first and a noisy flat one are usable; the same times reversed are not
    (a wide step timed at a fraction of a one-token step is not a measurement: it does all of that step's work)."""
    cpu = LatencyProfile("cpu", 256, (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64),
                         (0.0569, 0.0959, 0.1177, 0.0845, 0.098, 0.1021, 0.1147, 0.1224, 0.1473, 0.172, 0.225, 0.2789))
    flat = LatencyProfile("gpu", 256, (1, 8, 64), (0.0200, 0.0203, 0.0198))
    noisy = LatencyProfile("tiny", 256, (1, 2, 4, 8), (0.0016, 0.0014, 0.0030, 0.0012))
    for profile in (cpu, flat, noisy, CPU_LIKE, GPU_LIKE):
        profile.check()
        assert LatencyProfile.from_json(profile.to_json()) == profile
    for reversed_ in (cpu, CPU_LIKE):
        with pytest.raises(ProfileError, match="under 0.6 x"):
            LatencyProfile("cpu", 256, reversed_.qs, reversed_.seconds[::-1]).check()
    with pytest.raises(ProfileError, match="context"):
        LatencyProfile("cpu", 0, cpu.qs, cpu.seconds).check()


def test_auto_decodes_exactly_past_a_damaged_cache(tmp_path, monkeypatch):
    """Negative timings in the cache used to reach the adaptive drafter (a math domain error mid-decode): now the
    file is ignored with a warning, auto measures again and decodes exactly."""
    monkeypatch.setenv("LADE_CACHE", str(tmp_path))
    model = tiny_model("qwen2")
    path = profile_path(model)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(GOOD | {"key": lade.cost.device_key(model), "seconds": [-0.001, -0.0012, -0.002]}))
    ids = random_prompt(5)
    kw = dict(do_sample=False, max_new_tokens=16, eos_token_id=None)
    with pytest.warns(UserWarning, match="finite and positive"):
        out = lade.generate(model, ids, "auto", **kw)
    assert torch.equal(out, model.generate(ids, attention_mask=torch.ones_like(ids), **kw))
    read_profile(path).check()
