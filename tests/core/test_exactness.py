"""Greedy lookahead output equals plain `model.generate(do_sample=False)` token for token (fp32)."""

import pytest
import torch
from transformers import GenerationConfig

import lade
from greedy_runs import most_accepted
from tiny_models import ARCHITECTURES, random_prompt, tiny_model

CONFIGS = [
    lade.LookaheadConfig(window_size=4, ngram_size=3, guess_set_size=4),
    lade.LookaheadConfig(window_size=1, ngram_size=2, guess_set_size=0),  # no verification branch at all
    lade.LookaheadConfig(window_size=3, ngram_size=2, guess_set_size=2),
    lade.LookaheadConfig(window_size=2, ngram_size=5, guess_set_size=40),  # G larger than any pool entry
    lade.LookaheadConfig(window_size=5, ngram_size=4, guess_set_size=5, pool_from_prompt=False),
    lade.LookaheadConfig(window_size=0, ngram_size=6, guess_set_size=2, pool_capacity=8),  # pool only, by context
    lade.LookaheadConfig(window_size=3, ngram_size=4, guess_set_size=2, pool_capacity=12),
]
GREEDY = dict(do_sample=False, max_new_tokens=40, eos_token_id=None)


def plain(model, ids, **kw):
    return model.generate(ids, attention_mask=torch.ones_like(ids), **{**GREEDY, **kw})


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_greedy_equals_plain_greedy(arch, attn):
    """20 prompts (half with repeated spans, one long) cycling through the configs; the run must also
    really accept several tokens per step, or it would not test verification at all."""
    assert most_accepted(tiny_model(arch, attn), CONFIGS, GREEDY, long=300, short=24) >= 3


def test_model_generate_custom_generate_spellings():
    """Both transformers spellings: a `lookahead_config=` keyword and a GenerationConfig attribute."""
    model = tiny_model("qwen2", "sdpa")
    cfg = lade.LookaheadConfig(window_size=4, ngram_size=3, guess_set_size=4)
    for i in range(4):
        ids = random_prompt(100 + i)
        ref = plain(model, ids)
        out = model.generate(ids, attention_mask=torch.ones_like(ids), custom_generate=lade.lookahead_generate,
                             lookahead_config=cfg, **GREEDY)
        assert torch.equal(out, ref)
        gen = GenerationConfig(lookahead_config=cfg, **GREEDY)
        out = model.generate(ids, attention_mask=torch.ones_like(ids), generation_config=gen,
                             custom_generate=lade.lookahead_generate)
        assert torch.equal(out, ref)


def test_dict_output_scores_and_logits_match_plain():
    model = tiny_model("llama", "sdpa")
    ids = random_prompt(7)
    kw = dict(return_dict_in_generate=True, output_scores=True, output_logits=True, repetition_penalty=1.2)
    ref = plain(model, ids, **kw)
    out = lade.generate(model, ids, lade.LookaheadConfig(window_size=4, ngram_size=3, guess_set_size=4), **GREEDY, **kw)
    assert isinstance(out, lade.LookaheadDecoderOnlyOutput)
    assert torch.equal(out.sequences, ref.sequences)
    assert len(out.scores) == len(ref.scores) == 40
    for got, want in zip(out.scores, ref.scores):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    for got, want in zip(out.logits, ref.logits):
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    assert out.lookahead_stats.new_tokens == 40
    assert out.lookahead_stats.steps < 40


@pytest.mark.parametrize("processor_kwargs", [
    dict(repetition_penalty=1.5),
    dict(no_repeat_ngram_size=2),
    dict(bad_words_ids=[[5], [7, 8]], min_new_tokens=10, eos_token_id=3),
    dict(sequence_bias={(9,): 3.0}, suppress_tokens=[4, 6]),
])
def test_greedy_logits_processors_per_node(processor_kwargs):
    """Processors see each tree node's own prefix, so processed greedy equals plain processed greedy."""
    model = tiny_model("llama", "eager")
    for i in range(6):
        ids = random_prompt(200 + i)
        kw = {**GREEDY, **processor_kwargs}
        out = lade.generate(model, ids, lade.LookaheadConfig(window_size=4, ngram_size=3, guess_set_size=6), **kw)
        assert torch.equal(out, plain(model, ids, **processor_kwargs)), f"prompt {i}"
