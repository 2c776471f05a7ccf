"""Lookahead beam search equals plain `model.generate(num_beams=k, do_sample=False)` in fp32.

Why it must: lade replays plain beam search step by step with transformers' own step functions, each step fed every
running beam's next-token logits looked up in the drafted trees (equal to plain's single-token forwards to fp32
rounding), with the processors and stopping criteria called on plain's arguments; a step is replayed only when every
running beam's logits were computed. So sequences are identical and scores agree to fp32 tolerance.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch
from transformers.cache_utils import DynamicCache

import lade
from lade.beams import EXPLORE, MAX_EXPLORE, BeamPricing, _candidates
from lade.cache import reorder_rows, self_attention_cache
from lade.compat import CACHE_KWARG
from lade.drafters.pool import NGramPool
from lade.drafters.recycling import AdjacencyTable
from lade.drafters.step_cost import StepCost
from lade.pricing import Costs
from lade.rope import Positions
from tiny_models import random_prompt, tiny_model
from tiny_seq2seq import tiny_seq2seq

CFG = lade.LookaheadConfig(window_size=0, ngram_size=4, guess_set_size=4)
DICT = dict(return_dict_in_generate=True, output_scores=True)


def _both(model, ids, mask=None, config=CFG, latency=None, **kw):
    """(plain output, lade output, lade stats) of the same beam search call (latency: lade's lookahead_latency)."""
    kw = {"do_sample": False, "max_new_tokens": 16, **kw}
    mask = torch.ones_like(ids) if mask is None else mask
    plain = model.generate(ids, attention_mask=mask, **kw)
    extra = {} if latency is None else {"lookahead_latency": latency}
    out, stats = lade.generate(model, ids, config, attention_mask=mask, return_stats=True, **extra, **kw)
    return plain, out, stats


def _assert_same(plain, out):
    if isinstance(plain, torch.Tensor):
        assert torch.equal(plain, out)
        return
    assert torch.equal(plain.sequences, out.sequences)
    assert torch.equal(plain.beam_indices, out.beam_indices)
    if plain.sequences_scores is None:
        assert out.sequences_scores is None
    else:
        torch.testing.assert_close(out.sequences_scores, plain.sequences_scores, atol=1e-4, rtol=1e-4)
    _assert_same_cache(getattr(plain, CACHE_KWARG, None), getattr(out, CACHE_KWARG, None))
    for name in ("scores", "logits"):
        a, b = getattr(plain, name), getattr(out, name)
        assert (a is None) == (b is None), name
        if a is not None:
            assert len(a) == len(b), name
            for x, y in zip(a, b):
                torch.testing.assert_close(y, x, atol=1e-4, rtol=1e-4)


def _assert_same_cache(plain, ours):
    """The returned cache holds every running beam's tokens but its last, row for row, as plain beam search's does."""
    assert (plain is None) == (ours is None)
    if plain is None:
        return
    plain, ours = self_attention_cache(plain), self_attention_cache(ours)
    assert ours.get_seq_length() == plain.get_seq_length()
    for a, b in zip(plain.layers, ours.layers):
        torch.testing.assert_close(b.keys, a.keys, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(b.values, a.values, atol=1e-4, rtol=1e-4)


def _padded_batch(seeds=(1, 2, 3), lengths=(20, 14, 9)):
    prompts = [random_prompt(s, n)[0] for s, n in zip(seeds, lengths)]
    return lade.left_pad(prompts, 0)


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("k", [2, 4, 8])
def test_one_prompt_equals_plain_beam_search(arch, k):
    """Sequences, sequences_scores, scores, beam_indices as plain beam search returns them, for k beams."""
    model = tiny_model(arch)
    for i, seed in enumerate((3, 5)):
        ids = random_prompt(seed, 24)
        extra = DICT if i == 0 else {}
        _assert_same(*_both(model, ids, num_beams=k, **extra)[:2])


@pytest.mark.parametrize("k", [3, 5])
def test_left_padded_batch_equals_plain(k):
    """A left-padded batch of three prompts: each row's positions and cache slots skip its padding as plain's do."""
    model = tiny_model("llama")
    ids, mask = _padded_batch()
    _assert_same(*_both(model, ids, mask, num_beams=k, pad_token_id=0, num_return_sequences=2, **DICT)[:2])


@pytest.mark.parametrize("family", ["bart", "t5"])
@pytest.mark.parametrize("batch", [1, 2])
def test_encoder_decoder_equals_plain(family, batch):
    """Encoder-decoder beam search (every beam at one decoder length: one row of positions for the batch)."""
    model = tiny_seq2seq(family)
    ids, mask = _padded_batch(lengths=(16, 11)[:batch], seeds=(1, 2)[:batch]) if batch > 1 else (random_prompt(4, 16),
                                                                                                   None)
    _assert_same(*_both(model, ids, mask, num_beams=4, **DICT)[:2])


OPTIONS = [
    dict(length_penalty=0.5),
    dict(length_penalty=-1.0, early_stopping=True),
    dict(early_stopping=False),
    dict(early_stopping="never", length_penalty=2.0),
    dict(num_return_sequences=3),
    dict(eos_token_id=[7, 11, 40]),
    dict(min_new_tokens=6, eos_token_id=11),
    dict(no_repeat_ngram_size=2),
    dict(repetition_penalty=1.5),
    dict(bad_words_ids=[[10], [61, 65]]),
    dict(max_length=30, max_new_tokens=None),
    dict(output_logits=True),
    dict(output_scores=False),
]


@pytest.mark.parametrize("options", OPTIONS, ids=[",".join(o) for o in OPTIONS])
def test_generation_options_equal_plain(options):
    """Each option of plain beam search (length penalty, early stopping, EOS lists, processors, lengths) reaches
    the replayed steps exactly as plain beam search uses it."""
    model = tiny_model("llama")
    ids = random_prompt(3, 24)
    _assert_same(*_both(model, ids, num_beams=4, **{**DICT, "eos_token_id": 7, **options})[:2])


def test_drafts_are_accepted():
    """On a prompt whose beams fall into a loop, steps replay several beam search steps (compression > 1), and the
    output is still plain's: the speculative path runs, not only one-token steps."""
    model = tiny_model("llama")
    plain, out, stats = _both(model, random_prompt(3, 24), num_beams=4, max_new_tokens=40, **DICT)
    _assert_same(plain, out)
    assert stats.compression > 1.2
    assert max(stats.accepted_per_step) >= 3


def test_a_beam_drafts_its_own_next_tokens_first_then_the_pool_then_successor_chains():
    """Under the budget a beam's tree takes, in order and each draft that still fits: its next tokens alone (its own
    top ones, from the logits where its last token was computed, else the recorded successors of that token), so a
    second beam step replays wherever every survivor is among them; then the pool's continuations; then chains."""
    table = AdjacencyTable(vocab_size=20, width=4)
    table.update(torch.tensor([5, 9, 8]), torch.eye(20)[[1, 2, 3]] + torch.arange(20).flip(0) / 100)
    pool = NGramPool(ngram_size=4, guess_set_size=2)
    pool.add_sequence([5, 11, 12, 13])
    search = SimpleNamespace(max_length=100, cur_len=10, beams=2)
    run = SimpleNamespace(search=search, positions=Positions(None, [], None), table=table,
                          budget=6)
    assert _candidates(run, pool, [4, 5], 0, own=[9, 8, 7]) == [(9,), (8,), (11, 12, 13), (9, 2)]
    assert _candidates(run, pool, [4, 5], 0)[:2] == [(1,), (0,)]  # no own tokens: the recorded successors of 5
    run.table = None
    assert _candidates(run, pool, [4, 5], 0, own=[9, 8]) == [(11, 12, 13)]  # drafts disabled: no successors


def test_model_generate_custom_generate_and_disabled_config():
    """The custom_generate route, and a disabled config (plain one-step beam steps) through the same code."""
    model = tiny_model("llama")
    ids = random_prompt(5, 20)
    plain = model.generate(ids, attention_mask=torch.ones_like(ids), num_beams=3, do_sample=False, max_new_tokens=10)
    out = model.generate(ids, attention_mask=torch.ones_like(ids), num_beams=3, do_sample=False, max_new_tokens=10,
                         custom_generate=lade.lookahead_generate, lookahead_config=CFG)
    assert torch.equal(plain, out)
    _, off, stats = _both(model, ids, config=lade.LookaheadConfig(enabled=False), num_beams=3, max_new_tokens=10)
    assert torch.equal(plain, off) and stats.compression == 1.0


def test_auto_feeds_drafts_only_where_the_latency_model_says_they_pay(monkeypatch):
    """"auto" prices beam steps: where extra tokens cost nothing, drafted steps replay several beam steps; where a
    step's cost grows with every token fed (a compute-bound device), no drafted step is priced to pay and the steps are
    plain beam steps but for one drafted step after EXPLORE plain ones (and the interval doubles while those replay one
    step only); in between, drafts are fed while the steps they replay pay for them, and a random
    model's drafts soon stop paying, so most steps are plain beam steps. Always the output is plain beam search's (the
    replay decides the tokens, the drafts only how many per forward). The steps' own timings, which correct a latency
    model during a call (StepCost.observe), are left out, so the prices are the latency models' alone and the outcome
    does not depend on the machine's load."""
    monkeypatch.setattr(StepCost, "observe", lambda self, q, seconds: None)
    model = tiny_model("llama")
    ids = random_prompt(3, 24)
    kw = dict(num_beams=4, max_new_tokens=40, **DICT)
    plain, free, free_stats = _both(model, ids, config="auto", latency=lambda q: 1.0, **kw)
    _, linear, linear_stats = _both(model, ids, config="auto", latency=lambda q: float(q), **kw)
    _, mid, mid_stats = _both(model, ids, config="auto", latency=lambda q: 1.0 + 0.01 * q, **kw)
    for out in (free, linear, mid):
        _assert_same(plain, out)
    assert free_stats.compression > 1.2 and not free_stats.handed_over
    assert not linear_stats.handed_over and linear_stats.accepted_per_step[:EXPLORE] == [1] * EXPLORE
    assert linear_stats.compression < free_stats.compression
    assert not mid_stats.handed_over and mid_stats.compression < free_stats.compression
    assert mid_stats.accepted_per_step.count(1) > len(mid_stats.accepted_per_step) // 2




def test_exploration_backs_off_while_drafted_steps_replay_one_step_only():
    """A drafted step is fed after `explore` plain steps in a row where none is priced to pay; each such step that
    replays one beam step only doubles the interval (up to MAX_EXPLORE), and one that replays more resets it."""
    pricing = BeamPricing(Costs.of_latency(lambda q: float(q)), rows=1)  # no drafted step is priced to pay

    def plain_steps_before_a_drafted_one() -> int:
        n = 0
        while not pricing.drafts_pay(2):
            pricing.observe(False, 1)
            n += 1
        return n

    intervals = []
    for _ in range(6):
        intervals.append(plain_steps_before_a_drafted_one())
        pricing.observe(True, 1)
    assert intervals == [min(EXPLORE * 2**i, MAX_EXPLORE) for i in range(6)]
    pricing.observe(True, 3)
    assert plain_steps_before_a_drafted_one() == EXPLORE


@pytest.mark.parametrize("arch", ["decoder", "encoder-decoder"])
def test_a_beam_step_moves_only_the_beams_own_slots_and_returns_the_cache_plain_search_leaves(arch):
    """lade's beam loop writes each step's KV in place and reorders only the slots past the shared prompt (and no
    cross-attention after the first step): the cache it returns holds what plain beam search's does."""
    model = tiny_model("llama") if arch == "decoder" else tiny_seq2seq()
    ids = random_prompt(2, 12)
    kw = dict(num_beams=3, max_new_tokens=10, do_sample=False, return_dict_in_generate=True, use_cache=True)
    plain = model.generate(ids, attention_mask=torch.ones_like(ids), **kw)
    out = lade.generate(model, ids, CFG, attention_mask=torch.ones_like(ids), **kw)
    assert torch.equal(plain.sequences, out.sequences)
    mine, theirs = getattr(out, CACHE_KWARG), getattr(plain, CACHE_KWARG)
    for a, b in zip(self_attention_cache(mine).layers, self_attention_cache(theirs).layers):
        torch.testing.assert_close(a.keys, b.keys[..., : a.keys.shape[-2], :])
        torch.testing.assert_close(a.values, b.values[..., : a.values.shape[-2], :])
    if arch == "encoder-decoder":
        for a, b in zip(mine.cross_attention_cache.layers, theirs.cross_attention_cache.layers):
            torch.testing.assert_close(a.keys, b.keys)


def test_reorder_rows_equals_transformers_reorder_where_the_rows_share_the_slots_before_start():
    def cache(shared: int) -> DynamicCache:
        c = DynamicCache()
        for layer in range(2):
            keys, values = torch.randn(2, 4, 2, 9, 3).unbind(0)  # [N, H, S, D] each
            keys[:, :, :shared], values[:, :, :shared] = keys[:1, :, :shared], values[:1, :, :shared]
            c.update(keys, values, layer)
        return c

    origin = [2, 2, 0, 1]
    for start in (0, 5):
        torch.manual_seed(start)
        ours = cache(start)
        theirs = copy.deepcopy(ours)
        theirs.reorder_cache(torch.tensor(origin))
        reorder_rows(ours, origin, start)
        for a, b in zip(ours.layers, theirs.layers):
            assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)


def test_each_prompt_is_prefilled_once_for_its_k_beams():
    """Plain beam search feeds k copies of every prompt (its first step reads the first copy's logits alone); lade
    feeds each prompt once and repeats its KV for the k beams, with the same output, padding included."""
    model = tiny_model("llama")
    ids, mask = _padded_batch()  # [3, P], left-padded
    fed = []
    hook = model.register_forward_pre_hook(lambda module, args, kwargs: fed.append(tuple(kwargs["input_ids"].shape)),
                                           with_kwargs=True)
    try:
        plain, out, _ = _both(model, ids, mask, num_beams=3, max_new_tokens=8, pad_token_id=0)
    finally:
        hook.remove()
    _assert_same(plain, out)
    plain_prefill = fed[0]
    lade_prefill = next(shape for shape in fed[1:] if shape[1] == ids.shape[1])
    assert plain_prefill == (9, ids.shape[1]) and lade_prefill == (3, ids.shape[1])
