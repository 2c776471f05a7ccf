"""Scaled RoPE whose frequencies follow a forward's positions (lade/rope.py): dynamic NTK and longrope, crossing their
original length (48 here) mid-run. Plain `generate` is the oracle; each side decodes its own copy of the model, since
dynamic NTK keeps its frequencies on the model across calls."""

import copy
import inspect

import pytest
import torch
from transformers.cache_utils import DynamicCache

import lade
from lade.rope import POSITION_DEPENDENT, Positions, frequencies_kept, scaled_ropes
from tiny_models import ROPE_TYPES, random_prompt, rope_types, scaled_rope, tiny_model

ORIGINAL = 48
GREEDY = dict(do_sample=False, max_new_tokens=60, eos_token_id=None, pad_token_id=0)
LOGITS = dict(return_dict_in_generate=True, output_logits=True)
CONFIGS = [lade.LookaheadConfig(window_size=5, ngram_size=4, guess_set_size=4),
           lade.LookaheadConfig(window_size=0, ngram_size=6, guess_set_size=8), "auto"]


def model_with(arch: str, rope_type: str):
    return tiny_model(arch, **scaled_rope(arch, rope_type, ORIGINAL))


def both(model, ids, config, **kw):
    """(lade, plain) outputs, each decoded on its own copy of `model`."""
    kw = {**GREEDY, "attention_mask": torch.ones_like(ids), **kw}
    want = copy.deepcopy(model).generate(ids, **kw)
    got = lade.generate(copy.deepcopy(model), ids, config, **kw)
    return got, want


def assert_same(got, want):
    assert torch.equal(got.sequences, want.sequences)
    for ours, theirs in zip(got.logits, want.logits, strict=True):
        torch.testing.assert_close(ours, theirs, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("config", CONFIGS, ids=["window", "pool", "auto"])
@pytest.mark.parametrize("arch, rope_type", [("llama", "dynamic"), ("phi3", "longrope"), ("llama", "longrope")])
def test_crossing_the_original_length_equals_plain_greedy(arch, rope_type, config):
    """40-token prompt, 60 new tokens: plain decoding crosses position 48 one token at a time (longrope: short factors
    before it, long after; Phi-3 also re-encodes the sequence there; dynamic NTK: new frequencies at every token past
    it). lade's steps never place a token whose plain forward runs on other frequencies than the step's last token
    gets, and re-encode where Phi-3 does, so every token and every logit is plain decoding's."""
    got, want = both(model_with(arch, rope_type), random_prompt(3, 40), config, **LOGITS)
    assert_same(got, want)


@pytest.mark.parametrize("arch, rope_type", [("llama", "dynamic"), ("phi3", "longrope")])
def test_a_left_padded_prompt_crossing_equals_plain_greedy(arch, rope_type):
    """One prompt after 3 padding slots: positions count from its first real token, as in plain decoding; Phi-3's
    generate re-encodes at 49 slots counting the padding (still under the short factors) and crosses to the long
    ones later without re-encoding; lade follows both."""
    prompt, pad = random_prompt(4, 40), torch.zeros(1, 3, dtype=torch.long)
    ids, mask = torch.cat([pad, prompt], 1), torch.cat([pad, torch.ones_like(prompt)], 1)  # [1, 43]
    got, want = both(model_with(arch, rope_type), ids, CONFIGS[0], **LOGITS, attention_mask=mask)
    assert_same(got, want)


@pytest.mark.parametrize("cached", [10, 47])
def test_a_short_prefix_cache_under_a_long_prompt_is_dropped_as_phi3_generate_drops_it(cached):
    """A 52-token prompt whose first `cached` tokens are in a cache built under the short factors: Phi-3's generate
    drops that cache and encodes the whole prompt under the long ones; so does lade."""
    model, ids = model_with("phi3", "longrope"), random_prompt(5, 52)

    def prefix(m):
        cache = DynamicCache(config=m.config)
        with torch.no_grad():
            m(ids[:, :cached], cache=cache, use_cache=True)
        return cache

    plain_model, lade_model = copy.deepcopy(model), copy.deepcopy(model)
    kw = {**GREEDY, **LOGITS, "max_new_tokens": 12, "attention_mask": torch.ones_like(ids)}
    want = plain_model.generate(ids, cache=prefix(plain_model), **kw)
    got = lade.generate(lade_model, ids, CONFIGS[0], cache=prefix(lade_model), **kw)
    assert_same(got, want)


def test_dynamic_state_left_by_an_earlier_call_is_followed():
    """After a 100-token call, dynamic NTK keeps the frequencies of seq_len 100 on the model; a second call with a
    50-token prompt (past the original 48, so no reset) decodes under them until it passes 100. lade reads that state
    live, so its steps match plain decoding from the same state, for fixed configs and "auto"."""
    model = model_with("llama", "dynamic")
    ids = random_prompt(1, 40)
    model.generate(ids, attention_mask=torch.ones_like(ids), **{**GREEDY, "max_new_tokens": 61})
    assert scaled_ropes(model)[0].cached == 100
    for config in CONFIGS:
        got, want = both(model, random_prompt(2, 50), config, **LOGITS)
        assert_same(got, want)


def test_frequencies_kept_restores_dynamic_state():
    """A forward below the original length resets grown dynamic-NTK frequencies; frequencies_kept undoes it."""
    model = model_with("llama", "dynamic")
    with torch.no_grad():
        model(torch.arange(3, 63)[None])  # seq_len 60: grows
    rotary = scaled_ropes(model)[0]
    grown = rotary.module.inv_freq.clone()
    with frequencies_kept(model), torch.no_grad():
        model(torch.arange(3, 13)[None])  # seq_len 10 < 48: resets
        assert rotary.cached == ORIGINAL
    assert rotary.cached == 60 and torch.equal(rotary.module.inv_freq, grown)


@pytest.mark.parametrize("rope_type", ["dynamic", "longrope"])
def test_a_batch_that_would_cross_is_refused_and_one_that_stays_is_exact(rope_type):
    """A batch shares one seq_len per forward in plain decoding, which rows advancing separately cannot follow past
    the original length: refused before any work. A batch whose plain run stays below it decodes exactly."""
    model = model_with("llama", rope_type)
    ids, mask = lade.left_pad([random_prompt(7, 30)[0], random_prompt(8, 20)[0]], 0)
    with pytest.raises(ValueError, match="one prompt at a time"):
        lade.generate(model, ids, CONFIGS[0], attention_mask=mask, **GREEDY)
    kw = {**GREEDY, "max_new_tokens": ORIGINAL + 1 - 30, "attention_mask": mask}
    want = copy.deepcopy(model).generate(ids, **kw)
    assert torch.equal(lade.generate(copy.deepcopy(model), ids, CONFIGS[0], **kw), want)


def test_phi3_batch_past_the_re_encode_length_is_refused():
    """Phi-3's generate re-encodes the whole batch once it passes original_max_position_embeddings: refused."""
    model = model_with("phi3", "longrope")
    ids, mask = lade.left_pad([random_prompt(7, 30)[0], random_prompt(8, 20)[0]], 0)
    with pytest.raises(ValueError, match="re-encodes|RoPE"):
        lade.generate(model, ids, CONFIGS[0], attention_mask=mask, **GREEDY)


@pytest.mark.parametrize("rope_type", ROPE_TYPES)
def test_every_rope_type_is_classified(rope_type):
    """Only dynamic NTK and longrope change frequencies with positions (transformers' dynamic_rope_update); the
    others fix them when the model is built and put no bound on a step."""
    model = model_with("llama", rope_type)
    found = [r.kind for r in scaled_ropes(model)]
    assert found == ([rope_type] if rope_type in POSITION_DEPENDENT else [])
    assert (Positions.of(model).last_position(10) is None) == (rope_type not in POSITION_DEPENDENT)
    assert rope_type in rope_types("llama")


@pytest.mark.parametrize("rope_type", POSITION_DEPENDENT)
def test_the_frequencies_live_on_the_shared_rotary_module(rope_type):
    """Why a model with these RoPE types is not safe to share between threads, even for two plain `generate` calls
    (and why the fuzzer keeps them out of its two-thread cases): transformers writes the frequencies a forward picks
    into the rotary module, then that forward reads them back. Another thread's forward on the other side of the
    original length, landing between the write and the read, changes what is read; that interleaving is played out
    here in one thread: the write of a forward past the original length, then the read of a forward below it."""
    rotary = model_with("llama", rope_type).model.rotary_emb
    x, short, long_ = torch.zeros(1, 1, 8), torch.tensor([[10]]), torch.tensor([[ORIGINAL + 30]])
    alone = rotary(x, short)[0]  # [1, 1, head_dim]
    rotary(x, long_)  # another thread's forward
    read = inspect.unwrap(type(rotary).forward)(rotary, x, short)[0]  # this forward's read, after that write
    assert not torch.equal(read, alone)
    assert torch.equal(rotary(x, short)[0], alone)  # a forward of its own writes its frequencies back
