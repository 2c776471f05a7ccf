"""Lossless sampling: lade's do_sample=True output follows the distribution plain sampling draws from."""

import pytest
import torch
from scipy.stats import chisquare
from transformers.generation.logits_process import LogitsProcessorList

import lade
import lade.decoding
import lade.encoder_decoder
import lade.sampling
from lade.model_call import ModelCall
from lade.sampling import draw_at_node
from lade.verify import Acceptance
from tiny_models import random_prompt, tiny_model

VOCAB = 12  # small enough to enumerate every 3-token continuation (12^3 cells)
NEW = 3
SAMPLES = 7_000  # per setting: 21,000 lade samples over the three settings
POWER_SAMPLES = 2_000
CONFIG = lade.LookaheadConfig(window_size=3, ngram_size=3, guess_set_size=4)
SETTINGS = {  # (generate kwargs, config): temperature with a prefix-dependent processor; top-k; top-p
    "temperature": (dict(temperature=0.7, top_k=0, repetition_penalty=1.3), CONFIG),
    "top_k": (dict(temperature=1.0, top_k=4), lade.LookaheadConfig(3, 3, 4, sample_window=True)),
    "top_p": (dict(temperature=1.0, top_k=0, top_p=0.7), CONFIG),
}


@pytest.fixture(scope="module")
def small():
    """A tiny Llama over 12 tokens with sharpened logits, and a prompt it sampled itself, so that the prompt's
    n-grams (the drafts) are likely continuations and several drafts are often accepted in one step."""
    model = tiny_model("llama", "sdpa", vocab_size=VOCAB)
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    torch.manual_seed(0)
    start = torch.tensor([[3, 4, 5]])
    ids = model.generate(start, attention_mask=torch.ones_like(start), do_sample=True, max_new_tokens=45,
                         eos_token_id=None, top_k=0)
    return model, ids


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


def biased_walk(tree, logits, prefix, processors, keep_scores, generator) -> Acceptance:
    """The biased verifier: sample every candidate path independently, keep the longest match."""
    best = None
    for leaf in [n for n in range(len(tree)) if not tree.children(n)] or [None]:
        acc, ids, node = Acceptance([], [], []), prefix, -1
        for target in (tree.paths[leaf] if leaf is not None else []) + [None]:
            probs = processors(ids, logits[node + 1 : node + 2].clone()).softmax(-1)[0]
            token = draw_at_node(probs, [], generator)
            acc.tokens.append(token)
            acc.rows.append(node + 1)
            if target is None or tree.tokens[target] != token:
                break
            acc.path.append(target)
            node, ids = target, torch.cat([ids, ids.new_tensor([[token]])], dim=1)
        if best is None or len(acc.tokens) > len(best.tokens):
            best = acc
    return best


@torch.no_grad()
def lade_counts(model, ids, gen_kw, config, samples: int) -> tuple[torch.Tensor, float]:
    """Counts [V^3] of lade's first 3 tokens over `samples` runs of its loop, and the share of runs in which a
    step accepted more than one token."""
    processors, stopping, gen = prepared(model, ids, **gen_kw)
    ReplayCall.memo = {}
    counts, multi = torch.zeros(VOCAB**NEW, dtype=torch.long), 0
    torch.manual_seed(1234)  # sampling_seed=None: the draws continue on torch's default generator
    for _ in range(samples):
        out = lade.decoding.lookahead_generate(model, ids, processors, stopping, gen, lookahead_config=config)
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


@pytest.fixture
def replay(monkeypatch):
    monkeypatch.setattr(lade.encoder_decoder, "ModelCall", ReplayCall)


@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_first_tokens_follow_plain_sampling_distribution(small, replay, setting):
    """7,000 runs of lade's loop per setting (21,000 in all): the joint law of the first 3 tokens must fit the exact
    product of processed conditionals (chi-square, p > 1e-3); several drafts must really be verified and often
    accepted."""
    model, ids = small
    gen_kw, config = SETTINGS[setting]
    counts, multi = lade_counts(model, ids, gen_kw, config, SAMPLES)
    assert multi > 0.25, f"only {multi:.0%} of runs accepted more than one token per step"
    joint = exact_joint(model, ids, prepared(model, ids, **gen_kw)[0])
    assert goodness_of_fit(counts, joint) > 1e-3


def test_biased_verifier_is_rejected(small, replay, monkeypatch):
    """Power check: the same test must reject the longest-of-independent-samples verifier, even with fewer
    samples than the lossless runs get."""
    model, ids = small
    monkeypatch.setattr(lade.sampling, "sample_walk", biased_walk)
    gen_kw, config = SETTINGS["temperature"]
    counts, multi = lade_counts(model, ids, gen_kw, config, POWER_SAMPLES)
    assert multi > 0.25
    joint = exact_joint(model, ids, prepared(model, ids, **gen_kw)[0])
    assert goodness_of_fit(counts, joint) < 1e-3


def test_draw_at_node_when_drafts_hold_all_mass():
    """Drafts covering the whole support: the last draft is always accepted, never an empty residual."""
    probs = torch.zeros(8)
    probs[[2, 5]] = torch.tensor([0.3, 0.7])
    g = torch.Generator().manual_seed(0)
    drawn = {draw_at_node(probs, [5, 2], g) for _ in range(200)}
    assert drawn == {2, 5}
    assert {draw_at_node(probs, [1, 3], g) for _ in range(200)} == {2, 5}  # zero-probability drafts never win


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
    run = lambda seed: lade.generate(model, ids, lade.LookaheadConfig(4, 3, 4, sampling_seed=seed), **kw)
    assert torch.equal(run(7), run(7))
    assert not torch.equal(run(7), run(8))
    window = lade.LookaheadConfig(4, 3, 4, sample_window=True)
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
