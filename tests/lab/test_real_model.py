"""The embedded SmolLM2-135M-Instruct: greedy lookahead equals plain greedy on real MT-Bench and
HumanEval prompts (128 new tokens), and really compresses decoding."""

import os

import pytest
import torch

import lade
from lab.harness.models import load_model
from lab.harness.prompts import encode_chat, load_prompts

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def smollm2():
    threads = torch.get_num_threads()
    torch.set_num_threads(max(1, len(os.sched_getaffinity(0))))  # a real model uses every core
    yield load_model("embedded")
    torch.set_num_threads(threads)


@pytest.mark.parametrize("prompt_set, index", [("mt_bench", 0), ("humaneval", 0), ("humaneval", 2)])
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


def first_shape_disagreement(model, ids, mask, new_tokens: int = 24) -> int | None:
    """Plain greedy's own consistency: the first generated position whose token differs from the argmax of one
    forward over the whole greedy sequence (many tokens per forward, as any multi-token decoder feeds)."""
    out = model.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=new_tokens, eos_token_id=None)
    with torch.no_grad():
        logits = model(out, attention_mask=torch.ones_like(out)).logits[0]  # [S, V]
    same = logits[ids.shape[1] - 1 : -1].argmax(-1) == out[0, ids.shape[1] :]
    return None if bool(same.all()) else int((~same).nonzero()[0])


def test_int8_smollm2_consistency_across_forward_shapes_is_measured(smollm2, record_property):
    """Why lade is not asserted token-identical on SmolLM2 in bitsandbytes 8-bit: whether plain transformers agrees
    with itself there depends on the CPU. Where feeding the greedy sequence in one forward changes the argmax at a
    generated position (on an AMD EPYC, 8-bit with and without outlier decomposition, HumanEval/1 within its first 24
    tokens), no decoder that feeds several tokens per forward, lookahead or transformers' own prompt lookup, can
    reproduce plain greedy token for token; on an Intel Xeon with AVX-512/AMX it agrees. That is bitsandbytes' and
    oneDNN's kernel choice, not lade's, so the first disagreement (None: none in 24 tokens) is measured and reported
    (printed, and as properties of the test in pytest's JUnit XML), never asserted; fp32's own consistency too. lade's
    fp32 exactness is asserted by the tests above."""
    from transformers import BitsAndBytesConfig

    _, tokenizer = smollm2
    prompts = [encode_chat(tokenizer, load_prompts("humaneval")[1]["prompt"])]
    found = {"fp32": [first_shape_disagreement(smollm2[0], ids, mask) for ids, mask in prompts]}
    for threshold in (6.0, 0.0):
        int8, _ = load_model("embedded", quantization_config=BitsAndBytesConfig(load_in_8bit=True,
                                                                                 llm_int8_threshold=threshold))
        found[f"int8 threshold {threshold}"] = [first_shape_disagreement(int8, ids, mask) for ids, mask in prompts]
    cpu = torch.backends.cpu.get_cpu_capability()
    for name, positions in found.items():
        print(f"{name} ({cpu}): first position where one forward disagrees with incremental greedy: {positions}")
        record_property(f"first_disagreement {name}", positions)
        assert all(p is None or 0 <= p < 24 for p in positions)
