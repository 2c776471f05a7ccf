"""Quantized models (bitsandbytes 8-bit / 4-bit, AWQ) decode through lade exactly like plain greedy on the
same quantized model; unsupported methods and missing backends fail with a message saying what to do."""

import warnings

import bitsandbytes as bnb  # lade[bnb] is part of the test environment
import pytest
import torch
from transformers import BitsAndBytesConfig

import lade
from distribution import decoder_only, first_two_pvalues
from lade import quantization
from quantized_models import SIZES, hide_packages, load_quantized, save_tiny, save_tiny_awq
from tiny_models import random_prompt, tiny_model

CONFIGS = [
    lade.LookaheadConfig(window_size=4, ngram_size=3, guess_set_size=4),
    lade.LookaheadConfig(window_size=3, ngram_size=4, guess_set_size=3),
    lade.LookaheadConfig(window_size=5, ngram_size=2, guess_set_size=5, pool_from_prompt=False),
]
GREEDY = dict(do_sample=False, max_new_tokens=24, eos_token_id=None)
FP32 = dict(bnb_4bit_compute_dtype=torch.float32)
BNB = {
    "int8": (BitsAndBytesConfig(load_in_8bit=True), bnb.nn.Linear8bitLt),
    "int8-threshold0": (BitsAndBytesConfig(load_in_8bit=True, llm_int8_threshold=0.0), bnb.nn.Linear8bitLt),
    "nf4": (BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", **FP32), bnb.nn.Linear4bit),
    "fp4": (BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="fp4", **FP32), bnb.nn.Linear4bit),
    "nf4-double-bf16": (BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                           bnb_4bit_compute_dtype=torch.bfloat16), bnb.nn.Linear4bit),
}


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    return save_tiny(tmp_path_factory.mktemp("tiny-llama"))


def plain(model, ids, **kw):
    return model.generate(ids, attention_mask=torch.ones_like(ids), **{**GREEDY, **kw})


def assert_greedy_exact(model, prompts: int = 3) -> None:
    """Lookahead output == plain greedy of the same model on `prompts` prompts, with real multi-token steps."""
    accepted_max = 0
    for i in range(prompts):
        ids = random_prompt(200 + i, repeat=i % 2 == 0)
        out, stats = lade.generate(model, ids, CONFIGS[i % len(CONFIGS)], return_stats=True, **GREEDY)
        assert torch.equal(out, plain(model, ids)), f"prompt {i}, {CONFIGS[i % len(CONFIGS)]}"
        accepted_max = max(accepted_max, max(stats.accepted_per_step))
    assert accepted_max >= 3


@pytest.mark.parametrize("name", sorted(BNB))
def test_bnb_greedy_equals_plain_greedy(tiny_folder, name):
    """The quantized layers really are bitsandbytes layers, and lade matches plain greedy on them."""
    quant, layer_type = BNB[name]
    model = load_quantized(tiny_folder, quant)
    assert isinstance(model.model.layers[0].mlp.down_proj, layer_type)
    assert_greedy_exact(model)


def test_awq_greedy_equals_plain_greedy(tmp_path):
    """A tiny AWQ GEMM checkpoint loads through transformers' AWQ quantizer (on the CPU gptqmodel runs
    torch's int4 packed matmul in the activation dtype, fp32 here) and decodes exactly. Skipped only where
    gptqmodel (lade[awq]) is not installed."""
    pytest.importorskip("gptqmodel")
    model = load_quantized(save_tiny_awq(tmp_path))
    assert quantization.quantization_method(model.config.quantization_config) == "awq"
    assert "Awq" in type(model.model.layers[0].mlp.down_proj).__name__
    assert_greedy_exact(model)


@pytest.mark.parametrize("name", ["int8", "nf4"])
def test_bnb_warns_about_reduced_precision(tiny_folder, name):
    """bitsandbytes rounds activations (fp16 / int8 / bf16 on the CPU): lade says output may drift."""
    model = load_quantized(tiny_folder, BNB[name][0])
    with pytest.warns(UserWarning, match="bitsandbytes computes activations in reduced precision"):
        lade.generate(model, random_prompt(0), max_new_tokens=2)


@pytest.mark.parametrize("method, package, extra",
                         [("bitsandbytes", "bitsandbytes", "bnb"), ("awq", "gptqmodel", "awq")])
def test_missing_backend_says_what_to_install(method, package, extra, monkeypatch):
    """With the backend missing from the environment, decoding a model of that method names the package to install."""
    hide_packages(monkeypatch, package)
    model = tiny_model("llama")
    model.config.quantization_config = {"quant_method": method}
    with pytest.raises(ImportError, match=rf"'{package}' package: pip install 'lade-decoding\[{extra}\]'"):
        lade.generate(model, random_prompt(0), **GREEDY)


def test_unsupported_method_is_refused_and_gguf_passes():
    """GGUF weights are dequantized while loading (a plain float model); untested methods are refused."""
    model = tiny_model("llama")
    model.config.quantization_config = {"quant_method": "hqq"}
    with pytest.raises(ValueError, match="quantization method 'hqq' is not supported by lade"):
        lade.generate(model, random_prompt(0), **GREEDY)
    model.config.quantization_config = {"quant_method": "gguf"}
    ids = random_prompt(0)
    assert torch.equal(lade.generate(model, ids, CONFIGS[0], **{**GREEDY, "max_new_tokens": 8}),
                       plain(model, ids, max_new_tokens=8))


def test_bnb_4bit_sampling_is_lossless(tmp_path):
    """do_sample on an NF4 model (fp32 compute): the first two tokens follow plain sampling's exact joint
    distribution on the same quantized model (chi-square, p = 1e-3)."""
    model = tiny_model("llama", vocab_size=8, **SIZES)
    with torch.no_grad():
        model.lm_head.weight.mul_(6.0)
    model.save_pretrained(tmp_path)
    model = load_quantized(tmp_path, BNB["nf4"][0])
    prompt = torch.tensor([3, 4, 5, 3, 4, 5, 6])
    cfg = lade.LookaheadConfig(window_size=2, ngram_size=3, guess_set_size=4)
    torch.manual_seed(0)

    def draw():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = lade.generate(model, prompt[None], cfg, do_sample=True, top_k=0, max_new_tokens=2, eos_token_id=None)
        return out[:, len(prompt):]

    assert first_two_pvalues(decoder_only(model), [prompt], draw, samples=1500)[0] > 1e-3
