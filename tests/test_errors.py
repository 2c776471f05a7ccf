"""Bad input gets a clear error that says what to change, never silently wrong output."""

import pytest
import torch
import transformers
from transformers import LogitsProcessor, LogitsProcessorList

import lade
from tiny_models import random_prompt, tiny_model

GREEDY = dict(do_sample=False, max_new_tokens=8, eos_token_id=None)


@pytest.mark.parametrize("kwargs, name", [
    (dict(window_size=-1), "window_size"),
    (dict(window_size=0, guess_set_size=0), "window_size=0"),
    (dict(window_size=0, pool_from_prompt=False, pool_from_output=False), "window_size=0"),
    (dict(guess_set_size=4, pool_capacity=3), "pool_capacity"),
    (dict(ngram_size=1), "ngram_size"),
    (dict(guess_set_size=-1), "guess_set_size"),
    (dict(window_size=2.5), "window_size"),
    (dict(pool_from_prompt="yes"), "pool_from_prompt"),
    (dict(attention="flash"), "attention"),
])
def test_config_validation_names_the_parameter(kwargs, name):
    with pytest.raises(ValueError, match=name):
        lade.LookaheadConfig(**kwargs)


def test_padding_other_than_left_refused():
    """Batches are decoded (tests/test_batched.py), but only with left padding."""
    model = tiny_model()
    one = random_prompt(1)
    mask = torch.ones_like(one)
    mask[0, 3] = 0
    with pytest.raises(ValueError, match="left-padded"):
        lade.generate(model, one, attention_mask=mask, **GREEDY)


def test_mask_path_refuses_a_backend_that_cannot_take_the_tree_mask():
    model = tiny_model()
    model.config._attn_implementation = "flex_attention"
    with pytest.raises(ValueError, match="flex_attention"):
        lade.generate(model, random_prompt(1), lade.LookaheadConfig(attention="mask"), **GREEDY)


def test_sliding_window_cache_refused_with_model_type():
    model = tiny_model("mistral", sliding_window=16)
    with pytest.raises(ValueError, match="mistral"):
        lade.generate(model, random_prompt(1), **GREEDY)


def test_model_without_position_ids_refused():
    config = transformers.BloomConfig(vocab_size=96, hidden_size=32, n_layer=2, n_head=4)
    model = transformers.BloomForCausalLM(config).eval()
    with pytest.raises(ValueError, match="bloom"):
        lade.generate(model, random_prompt(1), **GREEDY)


class _Stateful(LogitsProcessor):
    def __call__(self, input_ids, scores):
        return scores


def test_unknown_logits_processor_refused_unless_declared_pure():
    model = tiny_model()
    ids = random_prompt(3)
    with pytest.raises(ValueError, match="_Stateful"):
        lade.generate(model, ids, logits_processor=LogitsProcessorList([_Stateful()]), **GREEDY)
    pure = _Stateful()
    pure.lade_prefix_pure = True
    out = lade.generate(model, ids, logits_processor=LogitsProcessorList([pure]), **GREEDY)
    assert torch.equal(out, model.generate(ids, attention_mask=torch.ones_like(ids), **GREEDY))


def test_beam_search_and_attention_outputs_refused():
    model = tiny_model()
    ids = random_prompt(4)
    with pytest.raises(ValueError, match="num_beams"):
        lade.generate(model, ids, **{**GREEDY, "num_beams": 2})
    with pytest.raises(ValueError, match="output_attentions"):
        lade.generate(model, ids, return_dict_in_generate=True, output_attentions=True, **GREEDY)
