"""The edges where a decoder can be silently wrong: caches passed in and handed back, position tables that end,
"auto" on every kind of model and machine. Each case: output equal to plain `generate`, or a clear error."""

import itertools
import os
import stat

import pytest
import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

import lade
from lade.cost import device_key
from lade.profile_cache import latency_profile
from tiny_hub import tiny_tokenizer
from tiny_models import random_prompt, tiny_model
from tiny_seq2seq import tiny_seq2seq

GREEDY = dict(do_sample=False, max_new_tokens=20, eos_token_id=None)
CONFIGS = [
    lade.LookaheadConfig(window_size=4, ngram_size=3, guess_set_size=4),
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
        assert all(type(layer) is DynamicLayer for layer in out.cache.layers)  # lade's in-place layers are released
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
        config = lade.LookaheadConfig(window_size=5, ngram_size=4, guess_set_size=5)
        assert torch.equal(lade.generate(model, ids, config, **kw), plain(model, ids, **kw))


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


def test_token_healing_heals_the_prompt_as_plain_generate_does():
    """token_healing=True with tokenizer= (which transformers does not hand a callable custom_generate): lade heals
    the prompt with the model's own heal_tokens, so the output equals plain generate's, healed prompt included. The
    LM head is nudged so that healing does change the prompt (its last token 'hel' -> 'hello')."""
    tok = tiny_tokenizer()
    model = tiny_model("llama", vocab_size=len(tok), pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
                       eos_token_id=tok.eos_token_id)
    ids = tok(["x+hel"], return_tensors="pt").input_ids  # [1, 3]: 'x', '+', 'hel'
    hel, hello = tok.convert_tokens_to_ids(["hel", "hello"])
    with torch.no_grad():
        hidden = model.model(ids[:, :-1]).last_hidden_state[0, -1]  # what predicts the healed last token
        model.lm_head.weight[hello] = model.lm_head.weight[hel] + 3 * hidden / hidden.square().sum()
    kw = dict(token_healing=True, tokenizer=tok, pad_token_id=tok.pad_token_id)
    want = plain(model, ids, **kw)
    assert ids[0, -1] == hel and want[0, 2] == hello  # healing changed the prompt
    assert torch.equal(lade.generate(model, ids, CONFIGS[0], **GREEDY, **kw), want)


def test_int32_ids_come_back_as_plain_returns_them():
    """An embedding takes int32 ids; plain generate appends int64 tokens to them, so it returns int64 sequences."""
    model = tiny_model("llama")
    ids = random_prompt(4).to(torch.int32)
    want = plain(model, ids)
    assert want.dtype == torch.long
    out = lade.generate(model, ids, CONFIGS[0], **GREEDY)
    assert out.dtype == torch.long and torch.equal(out, want)
    batch, mask = lade.left_pad([random_prompt(1)[0], random_prompt(2, length=9)[0]], 0)
    out = lade.generate(model, batch.to(torch.int32), CONFIGS[0], attention_mask=mask, pad_token_id=0, **GREEDY)
    assert out.dtype == torch.long
    assert torch.equal(out, model.generate(batch, attention_mask=mask, pad_token_id=0, **GREEDY))


def test_use_cache_false_returns_no_cache_as_plain_does():
    """use_cache=False: plain generate keeps no cache, so its output holds none; lade (which needs one to decode)
    hands none back either, with the same sequences."""
    model = tiny_model("llama")
    ids = random_prompt(5)
    kw = dict(use_cache=False, return_dict_in_generate=True)
    want = plain(model, ids, **kw)
    out = lade.generate(model, ids, CONFIGS[0], **GREEDY, **kw)
    assert want.cache is None and out.cache is None and torch.equal(out.sequences, want.sequences)
    assert lade.generate(model, ids, CONFIGS[0], **GREEDY, return_dict_in_generate=True).cache is not None


LENGTH_PROCESSORS = dict(renormalize_logits=True, exponential_decay_length_penalty=(6, 1.4), eos_token_id=2,
                         pad_token_id=0)


def prepared_processors(model, ids, **kw):
    """The logits processors transformers builds for this generate call (what it hands a custom_generate)."""
    got = {}

    def capture(model, input_ids, logits_processor, **_):
        got["processors"] = logits_processor
        return input_ids

    model.generate(ids, attention_mask=torch.ones_like(ids), custom_generate=capture, **kw)
    return got["processors"]


def test_length_processors_apply_per_node_with_the_nodes_prefix():
    """renormalize_logits (log-softmax) and exponential_decay_length_penalty (an eos boost growing with the prefix
    length) depend only on the node's prefix: greedy output and processed scores equal plain greedy's, and the
    penalty does end the sequences early (eos 2), so it was applied at the right lengths."""
    model = tiny_model("llama")
    multi = 0
    for config, seed in itertools.product(CONFIGS[:2], range(3)):
        ids = random_prompt(seed)
        kw = dict(GREEDY, max_new_tokens=40, output_scores=True, return_dict_in_generate=True, **LENGTH_PROCESSORS)
        want = plain(model, ids, **kw)
        out = lade.generate(model, ids, config, **kw)
        assert torch.equal(out.sequences, want.sequences) and want.sequences.shape[1] < ids.shape[1] + 40
        for got, ref in zip(out.scores, want.scores, strict=True):
            torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)
        multi += max(out.lookahead_stats.accepted_per_step) > 1
    assert multi  # some step accepted several tokens, each scored at its own node


def test_length_processors_in_sampling_are_plain_samplings():
    """Sampling with the same processors: top_k=1 leaves one token per node, so lade's sampled output equals plain's;
    at top_k=0 every token's processed scores equal the processors transformers built, applied to that token's own
    prefix and the model's logits there (the distribution plain sampling draws from)."""
    model = tiny_model("llama")
    ids = random_prompt(6)
    kw = dict(GREEDY, do_sample=True, max_new_tokens=30, **LENGTH_PROCESSORS)
    assert torch.equal(lade.generate(model, ids, CONFIGS[0], **{**kw, "top_k": 1}), plain(model, ids, **kw, top_k=1))
    torch.manual_seed(0)
    out = lade.generate(model, ids, CONFIGS[0], **kw, top_k=0, output_scores=True, return_dict_in_generate=True)
    processors = prepared_processors(model, ids, **kw, top_k=0)
    with torch.no_grad():
        for t, scores in enumerate(out.scores):
            prefix = out.sequences[:, : ids.shape[1] + t]
            want = processors(prefix, model(prefix).logits[:, -1].float())
            torch.testing.assert_close(scores, want, atol=1e-5, rtol=1e-5)
