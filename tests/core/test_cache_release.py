"""A call's in-place cache layers (lade.cache.slotted) free their buffers' spare room by copying the cache into compact
tensors only where the cache outlives the call (lade.cache.outlives_call): passed in by the caller, or returned with
return_dict_in_generate. Every loop (lade's, transformers' own after a handover, beam search) follows the one rule;
the outputs never change."""

import pytest
import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

import lade
import lade.decoding
from lade.cache import SlotLayer, self_attention_cache
from lade.compat import CACHE_KWARG
from tiny_models import COMMON, random_prompt, tiny_model

PAD = COMMON["pad_token_id"]
CFG = lade.LookaheadConfig(window_size=2, ngram_size=3, guess_set_size=2)
BEAM_CFG = lade.LookaheadConfig(window_size=0, ngram_size=4, guess_set_size=4)
STEEP = lambda q: 1.0 + 0.5 * q  # noqa: E731  (wide batched steps dear: "auto" hands a batch over)
GREEDY = dict(do_sample=False, max_new_tokens=12, pad_token_id=PAD)


def _batch():
    return lade.left_pad([random_prompt(s, length=10 + 4 * s)[0] for s in (1, 2, 3)], PAD)


# (name, inputs) -> (prompt ids, lade.generate arguments): lade's loop, transformers' after a handover, beam search
RUNS = {"lookahead": "_lookahead", "handover": "plain_generate", "beams": "beam_generate"}  # lade.decoding's
LOOPS = {
    "lookahead": lambda: (random_prompt(3, length=14), dict(lookahead_config=CFG)),
    "handover": lambda: (_batch()[0], dict(lookahead_config="auto", lookahead_latency=STEEP,
                                           attention_mask=_batch()[1])),
    "beams": lambda: (random_prompt(4, length=14), dict(lookahead_config=BEAM_CFG, num_beams=2)),
}


@pytest.fixture
def loops(monkeypatch):
    """The names (RUNS) of the loops each call ran."""
    ran = []
    for name, function in RUNS.items():
        wrapped = getattr(lade.decoding, function)
        monkeypatch.setattr(lade.decoding, function,
                            lambda *a, _name=name, _run=wrapped, **k: ran.append(_name) or _run(*a, **k))
    return ran


@pytest.fixture
def releases(monkeypatch):
    """Each SlotLayer.release's `compact` argument, in order."""
    seen = []
    release = SlotLayer.release
    monkeypatch.setattr(SlotLayer, "release", lambda self, compact=True: seen.append(compact) or release(self, compact))
    return seen


def _compact(cache) -> bool:
    """Whether every layer's keys and values own storage holding exactly their elements (no spare room)."""
    layers = self_attention_cache(cache).layers
    return bool(layers) and all(type(layer) is DynamicLayer for layer in layers) and all(
        t.untyped_storage().nbytes() == t.numel() * t.element_size() for layer in layers
        for t in (layer.keys, layer.values))


def _kwargs(name):
    ids, extra = LOOPS[name]()
    config = extra.pop("lookahead_config")
    return ids, config, extra


@pytest.mark.parametrize("name", LOOPS)
def test_a_call_whose_cache_dies_with_it_releases_without_copying(name, loops, releases):
    model = tiny_model()
    ids, config, extra = _kwargs(name)
    plain_kw = {k: v for k, v in extra.items() if k != "lookahead_latency"}
    out = lade.generate(model, ids, config, **GREEDY, **extra)
    assert loops == [name]
    assert torch.equal(out, model.generate(ids, **GREEDY, **plain_kw))
    assert releases and not any(releases)


@pytest.mark.parametrize("name", LOOPS)
def test_a_returned_cache_is_compact_and_decoding_goes_on_from_it(name, loops, releases):
    model = tiny_model()
    ids, config, extra = _kwargs(name)
    out = lade.generate(model, ids, config, return_dict_in_generate=True, **GREEDY, **extra)
    assert loops == [name]
    assert releases and all(releases)
    cache = getattr(out, CACHE_KWARG)
    assert _compact(cache)
    if name == "lookahead":  # (one row: its cache holds every token but the last, as plain generate leaves it)
        _assert_goes_on(model, out.sequences, cache)


def test_a_cache_the_caller_passes_in_is_compact_after_the_call_and_decoding_goes_on_from_it(releases):
    model = tiny_model()
    ids = random_prompt(3, length=14)
    cache = DynamicCache(config=model.config)
    out = lade.generate(model, ids, CFG, **GREEDY, **{CACHE_KWARG: cache})
    assert torch.equal(out, model.generate(ids, **GREEDY))
    assert releases and all(releases)
    assert _compact(cache)
    _assert_goes_on(model, out, cache)


def _assert_goes_on(model, sequences, cache):
    """Plain generate continuing from `sequences` with `cache` equals plain generate from the sequences alone."""
    assert cache.get_seq_length() == sequences.shape[1] - 1
    again = model.generate(sequences, **GREEDY, **{CACHE_KWARG: cache})
    assert torch.equal(again, model.generate(sequences, **GREEDY))
