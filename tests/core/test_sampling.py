"""Lossless sampling: lade's do_sample=True output follows the distribution plain sampling draws from, and equals
token for token a plain one-forward-per-token sampler that uses the same keyed noise, whatever the drafts."""

import dataclasses

import pytest
import torch
from scipy.stats import chisquare
from transformers.generation.logits_process import LogitsProcessorList

import lade
import lade.decoding
from distribution import BiasedStrategy
from lade.cost import LatencyProfile
from lade.model_call import ModelCall
from lade.profile_cache import latency_profile
from lade.rows import left_pad
from lade.sampling import position_noise, race
from tiny_models import drafts_often_accepted, random_prompt, tiny_model

VOCAB = 12  # small enough to enumerate every 3-token continuation (12^3 cells)
NEW = 3
SAMPLES = 5_000  # per setting: 15,000 lade samples over the three settings
POWER_SAMPLES = 2_000
CONFIG = lade.LookaheadConfig(window_size=3, ngram_size=3, guess_set_size=4)
SETTINGS = {  # (generate kwargs, config): temperature with a prefix-dependent processor; top-k; top-p
    "temperature": (dict(temperature=0.7, top_k=0, repetition_penalty=1.3), CONFIG),
    "top_k": (dict(temperature=1.0, top_k=4),
              lade.LookaheadConfig(window_size=3, ngram_size=3, guess_set_size=4, sample_window=True)),
    "top_p": (dict(temperature=1.0, top_k=0, top_p=0.7), CONFIG),
}


@pytest.fixture(scope="module")
def small():
    return drafts_often_accepted(VOCAB)


def prepared(model, ids, **gen_kw):
    """The logits processors, stopping criteria and generation config transformers hands a custom_generate."""
    got = {}

    def capture(model, input_ids, logits_processor, stopping_criteria, generation_config, **kw):
        got.update(processors=logits_processor, stopping=stopping_criteria, gen=generation_config)
        return input_ids

    model.generate(ids, attention_mask=torch.ones_like(ids), custom_generate=capture, do_sample=True,
                   max_new_tokens=NEW, eos_token_id=None, return_dict_in_generate=True, **gen_kw)
    return DirectProcessors(got["processors"]), got["stopping"], got["gen"]


class DirectProcessors(LogitsProcessorList):
    """The same processors, called directly: skips transformers' per-call signature inspection (speed only)."""

    def __call__(self, input_ids, scores, **kwargs):
        for processor in self:
            scores = processor(input_ids, scores)
        return scores


@torch.no_grad()
def exact_joint(model, ids, processors) -> torch.Tensor:
    """[V, V, V] probability of each first 3 tokens under plain sampling: product of processed conditionals."""
    def conditional(prefixes):  # [B, S] -> [B, V]
        return processors(prefixes, model(prefixes).logits[:, -1].float()).softmax(-1)

    tokens = torch.arange(VOCAB)
    ids1 = torch.cat([ids.expand(VOCAB, -1), tokens[:, None]], dim=1)  # [V, S+1]
    ids2 = torch.cat([ids1.repeat_interleave(VOCAB, 0), tokens.repeat(VOCAB)[:, None]], dim=1)  # [V*V, S+2]
    p1, p2, p3 = conditional(ids)[0], conditional(ids1), conditional(ids2).view(VOCAB, VOCAB, VOCAB)
    return p1[:, None, None].double() * p2[:, :, None] * p3


class ReplayCall(ModelCall):
    """Runs each distinct forward once, then replays its logits and appended KV rows. The model is a
    deterministic function of (cached tokens, step inputs), so a replay is exactly a rerun, and lade's loop runs
    unchanged at the speed of its own Python (20,000 real forwards would take minutes on this CPU)."""

    memo: dict = {}

    def _forward(self, input_ids, position_ids, attention_mask, **kwargs):
        layers = self.cache.layers if self.cache.get_seq_length() else []
        rows = kwargs.get("logits_to_keep")
        key = (b"".join(layer.keys.numpy().tobytes() for layer in layers), input_ids.numpy().tobytes(),
               position_ids.numpy().tobytes(), None if attention_mask is None else attention_mask.numpy().tobytes(),
               rows.numpy().tobytes() if isinstance(rows, torch.Tensor) else rows)
        if key not in self.memo:
            past = self.cache.get_seq_length()
            logits = super()._forward(input_ids, position_ids, attention_mask, **kwargs)
            kv = [(layer.keys[:, :, past:].clone(), layer.values[:, :, past:].clone()) for layer in self.cache.layers]
            self.memo[key] = (logits, kv)
            return logits
        logits, kv = self.memo[key]
        for i, (k, v) in enumerate(kv):
            self.cache.update(k, v, i)
        return logits


@torch.no_grad()
def lade_counts(model, ids, gen_kw, config, samples: int, strategy=None) -> tuple[torch.Tensor, float]:
    """Counts [V^3] of lade's first 3 tokens over `samples` runs of its loop, and the share of runs in which a
    step accepted more than one token. strategy: builds the loop's strategy (None: lade's own)."""
    processors, stopping, gen = prepared(model, ids, **gen_kw)
    ReplayCall.memo = {}
    counts, multi = torch.zeros(VOCAB**NEW, dtype=torch.long), 0
    torch.manual_seed(1234)  # sampling_seed=None: each run draws its noise key from torch's default generator
    for _ in range(samples):
        out = lade.decoding.lookahead_generate(model, ids, processors, stopping, gen, lookahead_config=config,
                                               lookahead_model_call=ReplayCall, lookahead_strategy=strategy)
        a, b, c = out.sequences[0, -NEW:].tolist()
        counts[(a * VOCAB + b) * VOCAB + c] += 1
        multi += max(out.lookahead_stats.accepted_per_step) > 1
    return counts, multi / samples


def goodness_of_fit(counts: torch.Tensor, joint: torch.Tensor) -> float:
    """Chi-square p-value; cells expecting fewer than 5 samples are pooled. Impossible outcomes must not occur."""
    expected = joint.flatten() * counts.sum()
    impossible = int(counts[expected == 0].sum())
    assert impossible == 0, f"{impossible} samples fall outside the processed distribution's support"
    big = expected >= 5
    f_obs = torch.cat([counts[big], counts[~big].sum().view(1)]).double()
    f_exp = torch.cat([expected[big], expected[~big].sum().view(1)])
    keep = f_exp > 0
    return float(chisquare(f_obs[keep].numpy(), f_exp[keep].numpy() * f_obs.sum().item() / f_exp.sum().item()).pvalue)


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny tensors: intra-op threads only add contention on a shared CPU."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_first_tokens_follow_plain_sampling_distribution(small, setting):
    """5,000 runs of lade's loop per setting (15,000 in all): the joint law of the first 3 tokens must fit the exact
    product of processed conditionals (chi-square, p > 1e-3); several drafts must really be verified and often
    accepted."""
    model, ids = small
    gen_kw, config = SETTINGS[setting]
    counts, multi = lade_counts(model, ids, gen_kw, config, SAMPLES)
    assert multi > 0.25, f"only {multi:.0%} of runs accepted more than one token per step"
    joint = exact_joint(model, ids, prepared(model, ids, **gen_kw)[0])
    assert goodness_of_fit(counts, joint) > 1e-3


def test_biased_verifier_is_rejected(small):
    """Power check: the same test must reject the longest-of-independent-samples verifier, even with fewer
    samples than the lossless runs get."""
    model, ids = small
    gen_kw, config = SETTINGS["temperature"]
    counts, multi = lade_counts(model, ids, gen_kw, config, POWER_SAMPLES, strategy=lambda *_: BiasedStrategy())
    assert multi > 0.25
    joint = exact_joint(model, ids, prepared(model, ids, **gen_kw)[0])
    assert goodness_of_fit(counts, joint) < 1e-3


def test_race_follows_the_distribution_and_never_picks_zero_probability():
    """The exponential race over each position's keyed noise draws v with probability p(v) (module docstring of
    lade/sampling.py), so over 20,000 positions the counts fit p (chi-square, p > 1e-3), tokens with p = 0 never
    win, and a point mass always wins. The noise is a pure function of (seed, row, position): recomputing it gives
    the same values, and another row or position other values."""
    probs = torch.tensor([0.0, 0.05, 0.1, 0.0, 0.25, 0.6])
    counts = torch.zeros(6)
    for position in range(20_000):
        counts[race(probs, position_noise(3, 0, position, 6))] += 1
    assert counts[[0, 3]].sum() == 0
    assert chisquare(counts[probs > 0].numpy(), (probs[probs > 0] * 20_000).numpy()).pvalue > 1e-3
    assert all(race(torch.eye(6)[2], position_noise(9, 1, t, 6)) == 2 for t in range(100))
    noise = position_noise(3, 0, 7, 50)
    assert torch.equal(noise, position_noise(3, 0, 7, 50)) and (noise > 0).all()
    assert len(set(noise.tolist())) == 50  # a keyed permutation: no two tokens share a uniform
    for other in (position_noise(4, 0, 7, 50), position_noise(3, 1, 7, 50), position_noise(3, 0, 8, 50)):
        assert not torch.equal(noise, other)


GREEDY = dict(max_new_tokens=20, eos_token_id=None)


@pytest.mark.parametrize("limit", [dict(top_k=1), dict(temperature=1e-6, top_k=0)])
def test_sampling_limit_equals_greedy(limit):
    """top_k=1 (and temperature -> 0) leaves one token with probability 1 at each node: greedy output."""
    model = tiny_model("llama", "sdpa")
    for i in range(3):
        ids = random_prompt(300 + i)
        want = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, **GREEDY)
        out, stats = lade.generate(model, ids, CONFIG, do_sample=True, return_stats=True, **limit, **GREEDY)
        assert torch.equal(out, want), f"prompt {i}"
        assert stats.steps < 20


def test_fixed_seed_reproduces():
    """sampling_seed fixes the output; without it, torch.manual_seed does, as with plain generate."""
    model = tiny_model("qwen2", "sdpa")
    ids = random_prompt(11)
    kw = dict(do_sample=True, temperature=1.0, top_k=0, **GREEDY)
    run = lambda seed: lade.generate(model, ids, lade.LookaheadConfig(window_size=4, ngram_size=3, guess_set_size=4,
                                                                      sampling_seed=seed), **kw)
    assert torch.equal(run(7), run(7))
    assert not torch.equal(run(7), run(8))
    window = lade.LookaheadConfig(window_size=4, ngram_size=3, guess_set_size=4, sample_window=True)
    outs = []
    for _ in range(2):
        torch.manual_seed(5)
        outs.append(lade.generate(model, ids, window, **kw))
    assert torch.equal(*outs)


def test_sampling_scores_are_processed_per_token():
    """output_scores under sampling: one processed [1, V] row per new token, -inf outside top-k."""
    model = tiny_model("llama", "sdpa")
    out = lade.generate(model, random_prompt(3), CONFIG, do_sample=True, top_k=5, return_dict_in_generate=True,
                        output_scores=True, **GREEDY)
    assert len(out.scores) == 20
    assert all(int(torch.isfinite(s).sum()) == 5 for s in out.scores)


def test_sampling_seed_is_validated():
    with pytest.raises(ValueError, match="sampling_seed"):
        lade.LookaheadConfig(sampling_seed=-1)
    with pytest.raises(ValueError, match="sample_window"):
        lade.LookaheadConfig(sample_window=1)


@torch.no_grad()
def reference_sample(model, prompt: torch.Tensor, processors, seed: int, new: int, row: int = 0) -> torch.Tensor:
    """Plain sampling with lade's keyed noise: one full forward per token; the token at position t (its index in
    prompt and output) is the exponential race of the processed distribution against position_noise(seed, row, t).
    prompt [1, P] -> [1, P + new]."""
    ids = prompt
    for _ in range(new):
        probs = processors(ids, model(ids).logits[:, -1].float())[0].double().softmax(-1)  # [V]
        noise = position_noise(seed, row, ids.shape[1], probs.shape[0])  # [V] Exp(1)
        ids = torch.cat([ids, ids.new_tensor([[int((probs / noise).argmax())]])], dim=1)
    return ids


REFERENCE_CONFIGS = {  # drafts of every kind and size, plain one-token steps, a sampled window
    "lookahead": lade.LookaheadConfig(window_size=4, ngram_size=3, guess_set_size=4),
    "wide": lade.LookaheadConfig(window_size=6, ngram_size=4, guess_set_size=6),
    "sampled window": lade.LookaheadConfig(window_size=3, ngram_size=3, guess_set_size=4, sample_window=True),
    "pool only": lade.LookaheadConfig(window_size=0, ngram_size=5, guess_set_size=3),
    "merged": lade.LookaheadConfig(draft="merged", window_size=3, ngram_size=3, guess_set_size=3, step_budget=8),
    "plain steps": lade.LookaheadConfig(enabled=False),
}
LONG = dict(do_sample=True, max_new_tokens=40, eos_token_id=None)


@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_sampled_output_equals_reference_noise_sampler(small, setting):
    """Each position's token is the race of its own processed distribution against its own keyed noise, and the
    drafts never enter that choice (lade/sampling.py), so lade's output must equal the one-forward-per-token
    reference sampler's token for token, for every draft kind and size, while steps really accept several tokens."""
    model, ids = small
    gen_kw = SETTINGS[setting][0]
    processors = prepared(model, ids, **gen_kw)[0]
    for seed in (0, 41):
        want = reference_sample(model, ids, processors, seed, LONG["max_new_tokens"])
        for name, config in REFERENCE_CONFIGS.items():
            cfg = dataclasses.replace(config, sampling_seed=seed)
            out, stats = lade.generate(model, ids, cfg, return_stats=True, **LONG, **gen_kw)
            assert torch.equal(out, want), (setting, seed, name)
            if name == "lookahead":
                assert max(stats.accepted_per_step) >= 3, "no step accepted several sampled tokens"


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt2"])
def test_sampled_output_equals_reference_on_architectures_and_batches(arch):
    """The same exactness on other architectures, one prompt and a left-padded batch: row b of a batch draws the
    noise of (seed, b, position), position counted without padding, so it equals the reference sampler run on
    that row's prompt alone with row = b."""
    model = tiny_model(arch, "sdpa")
    prompts = [random_prompt(500)[0], random_prompt(501, length=13)[0]]
    gen_kw = dict(temperature=0.3, top_k=0)
    cfg = lade.LookaheadConfig(window_size=4, ngram_size=3, guess_set_size=4, sampling_seed=17)
    processors = prepared(model, prompts[0][None], **gen_kw)[0]
    wants = [reference_sample(model, p[None], processors, 17, 24, row=b) for b, p in enumerate(prompts)]
    kw = dict(LONG, max_new_tokens=24, pad_token_id=0, **gen_kw)
    assert torch.equal(lade.generate(model, prompts[0][None], cfg, **kw), wants[0])
    ids, mask = left_pad(prompts, 0)
    batch = lade.generate(model, ids, cfg, attention_mask=mask, **kw)
    for b, (p, want) in enumerate(zip(prompts, wants)):
        assert torch.equal(batch[b, ids.shape[1] - len(p) :], want[0]), (arch, b)


def _inject_profile(model, folder, seconds) -> None:
    """A latency profile for `model` in the lade cache `folder` (the cache "auto" reads), with the given seconds
    per q in (1, 2, 4, 8, 16, 32, 64): the file a short measurement wrote, its timings replaced."""
    measured = latency_profile(model, cache=folder, qs=(1, 2), context=8, repeats=1)
    (path,) = (folder / "cost").glob("latency-*.json")
    path.write_text(LatencyProfile(measured.key, 256, (1, 2, 4, 8, 16, 32, 64), tuple(seconds)).to_json())


def test_same_seed_same_output_whatever_the_trees(small, tmp_path, monkeypatch):
    """The noise of a position does not depend on how steps group positions (lade/sampling.py), so one seed gives
    one output under every config, and under "auto" whichever latency model steers its adaptive trees: a flat
    profile (extra tokens free: wide trees) and a steep one (every extra token as dear as a step: one-token steps).
    The step patterns must really differ. Without sampling_seed, torch.manual_seed before the call fixes the key."""
    model, ids = small
    kw = dict(LONG, temperature=0.8, top_k=0)
    outs, patterns = [], set()
    for config in REFERENCE_CONFIGS.values():
        out, stats = lade.generate(model, ids, dataclasses.replace(config, sampling_seed=11), return_stats=True, **kw)
        outs.append(out)
        patterns.add(tuple(stats.accepted_per_step))
    assert all(torch.equal(out, outs[0]) for out in outs)
    assert len(patterns) >= 4

    flat, steep = tmp_path / "flat", tmp_path / "steep"
    _inject_profile(model, flat, [0.01] * 7)
    _inject_profile(model, steep, [0.05 * q for q in (1, 2, 4, 8, 16, 32, 64)])
    runs = {}
    for name, folder in (("flat", flat), ("steep", steep)):
        monkeypatch.setenv("LADE_CACHE", str(folder))
        adaptive = lade.auto_config(model, sampling_seed=11)
        assert adaptive.adaptive and adaptive.draft == "merged"
        out, stats = lade.generate(model, ids, adaptive, return_stats=True, **kw)
        assert torch.equal(out, outs[0]), name
        torch.manual_seed(5)
        runs[name] = lade.generate(model, ids, "auto", return_stats=True, **kw)
    torch.manual_seed(5)
    plain = lade.generate(model, ids, lade.LookaheadConfig(enabled=False), **kw)
    assert torch.equal(runs["flat"][0], plain) and torch.equal(runs["steep"][0], plain)
    assert not torch.equal(plain, outs[0])
    wide, narrow = runs["flat"][1].accepted_per_step, runs["steep"][1].accepted_per_step
    assert max(wide) > 1 and wide != narrow
