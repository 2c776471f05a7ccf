"""The edges where a decoder can be silently wrong: caches passed in and handed back, position tables that end,
"auto" on every kind of model and machine. Each case: output equal to plain `generate`, or a clear error."""

import os
import stat

import pytest
import torch
from transformers.cache_utils import DynamicCache

import lade
from lade.cost import device_key, latency_profile
from tiny_models import random_prompt, tiny_model
from tiny_seq2seq import tiny_seq2seq

GREEDY = dict(do_sample=False, max_new_tokens=20, eos_token_id=None)
CONFIGS = [
    lade.LookaheadConfig(4, 3, 4),
    lade.LookaheadConfig(window_size=0, ngram_size=5, guess_set_size=2, pool_capacity=8),
    lade.LookaheadConfig(enabled=False),
]


def plain(model, ids, **kw):
    return model.generate(ids, attention_mask=torch.ones_like(ids), **{**GREEDY, **kw})


def prefix_cache(model, ids: torch.Tensor, length: int) -> DynamicCache:
    """A cache holding the first `length` tokens of `ids` (prefix caching, as plain generate continues from it)."""
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model(ids[:, :length], cache=cache, use_cache=True)
    return cache


@pytest.mark.parametrize("config", CONFIGS, ids=["window", "pool-only", "disabled"])
@pytest.mark.parametrize("arch", ["llama", "gpt2"])
def test_a_prefix_cache_passed_in_continues_exactly(arch, config):
    """A DynamicCache already holding the prompt's first 10 tokens: only the rest is prefilled, at its positions."""
    model = tiny_model(arch)
    for seed in range(3):
        ids = random_prompt(seed)
        want = plain(model, ids, cache=prefix_cache(model, ids, 10))
        assert torch.equal(lade.generate(model, ids, config, cache=prefix_cache(model, ids, 10), **GREEDY), want)


def test_the_returned_cache_continues_exactly():
    """return_dict_in_generate: the cache handed back holds every token but the last, as plain generate's, also when
    max_new_tokens cuts a multi-token step; continuing from it with plain generate gives plain's continuation."""
    model = tiny_model("llama")
    ids = random_prompt(2)
    cut_mid_step = 0
    for n in range(4, 16):
        kw = dict(GREEDY, max_new_tokens=n, return_dict_in_generate=True)
        want = plain(model, ids, **kw)
        out = lade.generate(model, ids, CONFIGS[0], **kw)
        assert torch.equal(out.sequences, want.sequences)
        assert out.cache.get_seq_length() == want.cache.get_seq_length() == out.sequences.shape[1] - 1
        for got, ref in zip(out.cache.layers, want.cache.layers):
            torch.testing.assert_close(got.keys, ref.keys, atol=1e-5, rtol=1e-5)
        more = dict(GREEDY, max_new_tokens=8)
        assert torch.equal(plain(model, out.sequences, cache=out.cache, **more),
                           plain(model, want.sequences, cache=want.cache, **more))
        cut_mid_step += out.lookahead_stats.accepted_per_step[-1] > 1 or sum(out.lookahead_stats.accepted_per_step) > n
    assert cut_mid_step


@pytest.mark.parametrize("arch, limit", [("gpt2", dict(max_position_embeddings=64)),
                                         ("llama", dict(max_position_embeddings=64))])
def test_drafts_never_pass_a_position_table(arch, limit):
    """GPT-2 (learned absolute positions) with a 64-entry table: near the end the window and candidates are cut so no
    token is placed past the table, while plain decoding still fits; the output equals plain greedy."""
    model = tiny_model(arch, **limit)
    assert model.config.max_position_embeddings == 64
    for seed in range(3):
        ids = random_prompt(seed, length=24)
        kw = dict(GREEDY, max_new_tokens=40)  # the sequence fills all 64 positions
        assert torch.equal(lade.generate(model, ids, lade.LookaheadConfig(5, 4, 5), **kw), plain(model, ids, **kw))


@pytest.mark.parametrize("family", ["bart", "t5"])
def test_auto_on_encoder_decoder_models(family, tmp_path, monkeypatch):
    """"auto" times the decoder attending to an encoded source (the encoder-decoder model call), then decodes."""
    monkeypatch.setenv("LADE_CACHE", str(tmp_path))
    model = tiny_seq2seq(family)
    ids = random_prompt(1, length=16)
    assert torch.equal(lade.generate(model, ids, "auto", **GREEDY), plain(model, ids))


@pytest.mark.parametrize("arch, limit", [("gpt2", dict(max_position_embeddings=96)),
                                         ("llama", dict(max_position_embeddings=96))])
def test_auto_measures_within_the_position_table(arch, limit, tmp_path, monkeypatch):
    """The latency profile's context and step sizes are cut to fit a small position table."""
    monkeypatch.setenv("LADE_CACHE", str(tmp_path))
    model = tiny_model(arch, **limit)
    profile = latency_profile(model, repeats=1)
    assert profile.context + max(profile.qs) <= 96 and 1 in profile.qs
    ids = random_prompt(2)
    assert torch.equal(lade.generate(model, ids, "auto", **GREEDY), plain(model, ids))


def test_auto_with_an_unwritable_cache_directory_warns_and_decodes(tmp_path, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(stat.S_IRUSR | stat.S_IXUSR)
    if os.access(locked, os.W_OK):  # root ignores permission bits: make the cache path a file instead
        locked = tmp_path / "a-file"
        locked.write_text("not a folder")
    monkeypatch.setenv("LADE_CACHE", str(locked))
    model = tiny_model("llama")
    ids = random_prompt(3)
    with pytest.warns(UserWarning, match="could not cache the latency profile"):
        out = lade.generate(model, ids, "auto", **GREEDY)
    assert torch.equal(out, plain(model, ids))


def test_latency_cache_keys_differ_by_model_shape():
    """Two models built from configs (same class, same empty name) but of different sizes never share a profile."""
    small, large = tiny_model("llama"), tiny_model("llama", hidden_size=64, num_hidden_layers=3)
    assert device_key(small) != device_key(large)
    assert device_key(small) == device_key(tiny_model("llama", seed=1))  # weights do not change the cost
