""""auto" with several rows per step hands the whole call to transformers' own loop where no draft is priced to pay
(lade/handover.py): the output is plain generate's, the stats say so, and nothing else hands over. Latency models are
injected (lookahead_latency=): STEEP prices wide batched steps dear, FREE makes them nearly free."""

import pytest
import torch
from transformers.cache_utils import DynamicLayer

import lade
from lade.beams import EXPLORE
from lade.cache import SlotLayer
from lade.compat import CACHE_KWARG
from lade.cost import device_key, prior_table
from lade.cost_prior import PRIOR
from lade.handover import batch_speedup, drafts_can_pay, slowest_row_prior
from lade.pricing import THRESHOLD, Costs
from lade.profile_cache import latency_profile, profile_path
from tiny_models import COMMON, random_prompt, tiny_model
from tiny_seq2seq import tiny_seq2seq

PAD = COMMON["pad_token_id"]
GREEDY = dict(do_sample=False, max_new_tokens=24, pad_token_id=PAD)
FREE = lambda q: 1.0 + 1e-4 * q  # noqa: E731
STEEP = lambda q: 1.0 + 0.5 * q  # noqa: E731


def batch(rows=3):
    return lade.left_pad([random_prompt(s, length=12 + 5 * s)[0] for s in range(1, rows + 1)], PAD)


def both(model, ids, mask, config, latency, **kw):
    kw = {**GREEDY, **kw}
    plain = model.generate(ids, attention_mask=mask, return_dict_in_generate=True, output_scores=True, **kw)
    out = lade.generate(model, ids, config, lookahead_latency=latency, attention_mask=mask,
                        return_dict_in_generate=True, output_scores=True, **kw)
    return plain, out


def test_the_rule_never_hands_over_one_row_and_follows_the_latency_model():
    assert drafts_can_pay(Costs.of_latency(STEEP), 1)
    assert drafts_can_pay(Costs.of_latency(FREE), 4)
    assert not drafts_can_pay(Costs.of_latency(STEEP), 4)


def test_a_batch_larger_than_one_priced_not_to_pay_hands_over_without_its_own_price():
    """Where drafting cannot pay at a row count priced without measuring, a larger batch hands over, whatever its
    own price (which may need a profile not measured yet) would say."""
    dear_at_four = Costs(lambda rows, q: 1.0 + (0.5 if rows == 4 else 1e-4) * rows * q)
    assert drafts_can_pay(dear_at_four, 8) and not drafts_can_pay(dear_at_four, 4)
    assert not drafts_can_pay(dear_at_four, 8, priced=(1, 4))
    assert drafts_can_pay(dear_at_four, 3, priced=(1, 4))  # a smaller batch is priced itself


def test_a_batch_is_priced_by_its_slowest_row():
    """The slowest of R rows keeps 2 / (R + 1) of a config's mean compression gain (the least of R rows spread evenly
    from 1 to 2c - 1), feeds one token per row only where all R rows would, and as many tokens per row."""
    for rows in (1, 3, 8):  # one row is its own slowest
        slowest = slowest_row_prior(rows)
        for task, table in PRIOR.items():
            for key, (c, tokens, single) in table.items():
                assert slowest[task][key] == pytest.approx((1 + 2 * (c - 1) / (rows + 1), tokens, single**rows))


def test_a_batch_drafts_where_its_slowest_row_pays_for_the_wider_step():
    """With steps that cost the same at every width, the batch's speedup is the best config's slowest-row compression
    over the step plus R rows' host work (drafting, and lade's loop beyond transformers'); it falls with the rows."""
    flat = Costs(lambda rows, q: 1.0, host_s=1.8e-3, loop_s=0.7e-3)
    for rows in (2, 4, 16):
        best = max(1 + 2 * (c - 1) / (rows + 1) for c, _, _ in prior_table("code").values())
        host = rows * (flat.host_s + flat.loop_s)
        assert batch_speedup(flat, rows, "code") == pytest.approx(best / (1 + host))
        assert drafts_can_pay(flat, rows, "code") == (best / (1 + host) > THRESHOLD)
    assert batch_speedup(flat, 2, "code") > batch_speedup(flat, 4, "code") > batch_speedup(flat, 16, "code")
    assert batch_speedup(flat, 4, "code") > batch_speedup(flat, 4, "chat")
    assert drafts_can_pay(Costs.of_latency(lambda q: 1e9 * q), 1)  # one sequence sizes its own steps


@pytest.mark.parametrize("eos", [None, 7])
def test_a_batch_where_drafts_cannot_pay_runs_plain_generate(eos):
    model = tiny_model()
    ids, mask = batch()
    plain, out = both(model, ids, mask, "auto", STEEP, eos_token_id=eos)
    assert torch.equal(out.sequences, plain.sequences)
    assert len(out.scores) == len(plain.scores)
    for a, b in zip(plain.scores, out.scores):
        assert torch.equal(a, b)
    assert out.lookahead_stats.handed_over and all(s.handed_over for s in out.row_stats)
    new = out.sequences[:, ids.shape[1] :]
    for row, stats in zip(new, out.row_stats):
        hits = (row == eos).nonzero() if eos is not None else []
        expected = int(hits[0, 0]) + 1 if len(hits) else new.shape[1]
        assert stats.steps == stats.new_tokens == expected  # one token per forward
    assert out.lookahead_stats.new_tokens == sum(s.new_tokens for s in out.row_stats)


def test_a_handed_over_batch_writes_its_cache_in_place_and_returns_plain_layers(monkeypatch):
    """transformers' loop runs over lade's in-place cache layers (lade.cache.slotted); the cache it returns holds
    plain DynamicLayers with exactly plain generate's keys and values."""
    model = tiny_model()  # (encoder-decoder models decode one input at a time: no batch to hand over)
    ids, mask = batch()
    updates = []
    update = SlotLayer.update
    monkeypatch.setattr(SlotLayer, "update", lambda self, *a, **k: updates.append(self) or update(self, *a, **k))
    plain, out = both(model, ids, mask, "auto", STEEP)
    assert out.lookahead_stats.handed_over and torch.equal(out.sequences, plain.sequences)
    assert len(updates) == GREEDY["max_new_tokens"] * model.config.num_hidden_layers  # a forward per new token
    returned, expected = getattr(out, CACHE_KWARG), getattr(plain, CACHE_KWARG)
    assert all(type(layer) is DynamicLayer for layer in returned.layers)
    for ours, theirs in zip(returned.layers, expected.layers, strict=True):
        assert torch.equal(ours.keys, theirs.keys) and torch.equal(ours.values, theirs.values)


def test_a_batch_where_drafts_pay_and_explicit_configs_never_hand_over():
    model = tiny_model()
    ids, mask = batch()
    explicit = lade.LookaheadConfig(window_size=2, ngram_size=3, guess_set_size=2)
    for config, latency in (("auto", FREE), (explicit, None)):
        plain, out = both(model, ids, mask, config, latency)
        assert torch.equal(out.sequences, plain.sequences)
        assert not out.lookahead_stats.handed_over


def test_one_sequence_never_hands_over():
    model = tiny_model()
    ids = random_prompt(3, length=30)
    plain, out = both(model, ids, torch.ones_like(ids), "auto", STEEP)
    assert torch.equal(out.sequences, plain.sequences)
    assert not out.lookahead_stats.handed_over


@pytest.mark.parametrize("arch", ["decoder", "encoder-decoder"])
def test_auto_beam_search_where_no_draft_pays_runs_its_own_loop_undrafted(arch):
    """Beam search never hands over: where no draft is priced to pay, its steps feed every beam's last token alone,
    one beam search step per forward, until EXPLORE such steps call for a drafted one."""
    model = tiny_model() if arch == "decoder" else tiny_seq2seq()
    ids = random_prompt(2, length=20)
    kw = dict(num_beams=4, num_return_sequences=2, do_sample=False, max_new_tokens=12)
    plain = model.generate(ids, attention_mask=torch.ones_like(ids), return_dict_in_generate=True,
                           output_scores=True, **kw)
    out, stats = lade.generate(model, ids, "auto", lookahead_latency=STEEP, return_stats=True,
                               return_dict_in_generate=True, output_scores=True, **kw)
    assert torch.equal(out.sequences, plain.sequences) and torch.equal(out.beam_indices, plain.beam_indices)
    torch.testing.assert_close(out.sequences_scores, plain.sequences_scores)
    assert not stats.handed_over and stats.accepted_per_step[:EXPLORE] == [1] * EXPLORE  # (then it re-measures)
    assert torch.equal(lade.generate(model, ids, "auto", lookahead_latency=STEEP, **kw), plain.sequences)


def test_a_corpus_learns_a_handed_over_call():
    model = tiny_model()
    ids, mask = batch()
    corpus = lade.Corpus()
    lade.generate(model, ids, "auto", lookahead_latency=STEEP, attention_mask=mask, corpus=corpus,
                  **{**GREEDY, "eos_token_id": None})
    assert corpus.requests == ids.shape[0]
    assert len(corpus) == int(mask.sum()) + ids.shape[0] * GREEDY["max_new_tokens"]  # prompts unpadded, every output


def test_batch_profiles_are_measured_and_cached_per_row_count(tmp_path):
    model = tiny_model()
    one = latency_profile(model, tmp_path, qs=(1, 2), context=8, repeats=1)
    three = latency_profile(model, tmp_path, rows=3, qs=(1, 2), context=8, repeats=1)
    assert three.key == device_key(model, 3) != one.key == device_key(model)
    assert profile_path(model, tmp_path, 3) != profile_path(model, tmp_path)
    assert latency_profile(model, tmp_path, rows=3) == three  # from the cache
