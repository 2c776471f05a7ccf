"""The embedded SmolLM2-135M-Instruct: greedy lookahead equals plain greedy on real MT-Bench and
HumanEval prompts (128 new tokens), and really compresses decoding."""

import pytest
import torch

import lade
from lade.data import encode_chat, load_prompts
from lade.models import load_model

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2():
    return load_model("embedded")


@pytest.mark.parametrize("prompt_set, index", [("mt_bench", 0), ("mt_bench", 9), ("humaneval", 0), ("humaneval", 2)])
def test_greedy_identical_on_real_prompts(smollm2, prompt_set, index):
    model, tokenizer = smollm2
    ids, mask = encode_chat(tokenizer, load_prompts(prompt_set)[index]["prompt"])
    kw = dict(do_sample=False, max_new_tokens=128, eos_token_id=None)
    ref = model.generate(ids, attention_mask=mask, **kw)
    out, stats = lade.generate(model, ids, lade.LookaheadConfig(window_size=5, ngram_size=4, guess_set_size=5),
                               attention_mask=mask, return_stats=True, **kw)
    print(f"{prompt_set}[{index}]: compression {stats.compression:.2f} over {stats.steps} steps")
    assert torch.equal(out, ref)
    assert stats.compression > 1.1
