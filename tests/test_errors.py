"""Bad input gets a clear error that says what to change, never silently wrong output."""

import pytest
import torch
import transformers
from transformers import LogitsProcessor, LogitsProcessorList

import lade
from tiny_models import random_prompt, tiny_model

GREEDY = dict(do_sample=False, max_new_tokens=8, eos_token_id=None)


@pytest.mark.parametrize("kwargs, name", [
    (dict(window_size=0), "window_size"),
    (dict(ngram_size=1), "ngram_size"),
    (dict(guess_set_size=-1), "guess_set_size"),
    (dict(window_size=2.5), "window_size"),
    (dict(pool_from_prompt="yes"), "pool_from_prompt"),
    (dict(attention="flash"), "attention"),
])
def test_config_validation_names_the_parameter(kwargs, name):
    with pytest.raises(ValueError, match=name):
        lade.LookaheadConfig(**kwargs)


def test_unpadded_batch_and_padding_refused():
    model = tiny_model()
    ids = torch.cat([random_prompt(1), random_prompt(2)])
    with pytest.raises(ValueError, match="batch size 2"):
        lade.generate(model, ids, **GREEDY)
    one = random_prompt(1)
    mask = torch.ones_like(one)
    mask[0, 0] = 0
    with pytest.raises(ValueError, match="padded"):
        lade.generate(model, one, attention_mask=mask, **GREEDY)


def test_unsupported_attention_backend_refused():
    model = tiny_model()
    model.config._attn_implementation = "flex_attention"
    with pytest.raises(ValueError, match="flex_attention"):
        lade.generate(model, random_prompt(1), **GREEDY)


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
