"""Attention paths: split (fused prefix + masked in-step block, merged by log-sum-exp) and flex equal eager masked
attention; lade decodes exactly with every path available on CPU, including a model configured for FA2."""

import pytest
import torch
from torch import nn
from transformers.cache_utils import DynamicCache
from transformers.models.llama.modeling_llama import LlamaForCausalLM, eager_attention_forward

import lade
from lade.attention import choose_attention
from lade.attention.interface import flex_attention_forward, split_attention_forward
from lade.attention.kernels import split_attention
from lade.layout import build_layout, stack_layouts
from lade.model_call import ModelCall
from lade.tree import TokenTree
from tiny_models import random_prompt, tiny_model

GREEDY = dict(do_sample=False, max_new_tokens=30, eos_token_id=None)
CPU = torch.device("cpu")


def _step_visibilities() -> list[torch.Tensor]:
    """[q, q] in-step masks of real lookahead steps (build_layout), from 1 token up to 1 + W(N-1) + tree."""
    g = torch.Generator().manual_seed(0)
    shapes = [(1, 1, []), (1, 3, [(5,)]), (2, 4, [(5, 6), (5, 7), (8, 9)]), (3, 5, [(1, 2, 3), (1, 2, 4), (6, 7, 8)]),
              (4, 7, [tuple(torch.randint(3, 9, (4,), generator=g).tolist()) for _ in range(7)])]
    out = []
    for levels, width, candidates in shapes:
        window = torch.randint(3, 90, (levels, width), generator=g)
        out.append(build_layout(1, window, TokenTree(candidates), CPU).visible)
    return out


def _random_visibility(q: int, seed: int) -> torch.Tensor:
    """A random [q, q] mask in which each row sees at least itself."""
    visible = torch.rand(q, q, generator=torch.Generator().manual_seed(seed)) < 0.4
    return visible | torch.eye(q, dtype=torch.bool)


def _eager(query, key, value, visible, scale):
    """transformers' eager attention with the full additive mask [1, 1, q, past+q] -> [B, q, H, D]."""
    module = nn.Module().eval()
    module.num_key_value_groups = query.shape[1] // key.shape[1]
    q, past = query.shape[2], key.shape[2] - query.shape[2]
    mask = torch.zeros(1, 1, q, past + q, dtype=query.dtype)
    mask[..., past:].masked_fill_(~visible, torch.finfo(query.dtype).min)
    return eager_attention_forward(module, query, key, value, mask, scale)[0]


def _qkv(q: int, past: int, heads: int, kv_heads: int, dtype: torch.dtype, seed: int, dim: int = 16):
    g = torch.Generator().manual_seed(seed)
    query = torch.randn(1, heads, q, dim, generator=g) * 2  # scaled so that softmaxes are peaked, not uniform
    key = torch.randn(1, kv_heads, past + q, dim, generator=g) * 2
    value = torch.randn(1, kv_heads, past + q, dim, generator=g)
    return query.to(dtype), key.to(dtype), value.to(dtype)


CASES = [(vis, past, heads) for i, vis in enumerate(_step_visibilities() + [_random_visibility(q, q) for q in (2, 9)])
         for past, heads in zip((0, 1, 6, 150, 300)[i % 2:], ((4, 4), (4, 2), (6, 1), (8, 2), (4, 1)))]


@pytest.mark.parametrize("kernel", ["sdpa_flash_cpu", "math"])
@pytest.mark.parametrize("visible,past,heads", CASES)
def test_split_equals_eager_masked_attention_fp32(visible, past, heads, kernel):
    """Softmax over a union of disjoint key sets is the lse-weighted mix of the parts' softmaxes, so the split
    result equals one masked softmax up to fp32 rounding; cache lengths from 0, grouped-query heads."""
    q = visible.shape[0]
    query, key, value = _qkv(q, past, *heads, torch.float32, seed=q + past)
    want = _eager(query, key, value, visible, 0.25)
    got = split_attention(query, key, value, visible, 0.25, kernel).transpose(1, 2)
    torch.testing.assert_close(got, want, atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("visible,past,heads", CASES[::3])
def test_split_bf16_is_as_accurate_as_eager_bf16(visible, past, heads):
    """In bf16 both paths round; split must stay within the error of bf16 eager attention (vs an fp64 truth)."""
    q = visible.shape[0]
    query, key, value = _qkv(q, past, *heads, torch.bfloat16, seed=7 + q + past)
    truth = _eager(query.double(), key.double(), value.double(), visible, 0.25)
    eager_err = (_eager(query, key, value, visible, 0.25).double() - truth).abs().max()
    split_err = (split_attention(query, key, value, visible, 0.25).transpose(1, 2).double() - truth).abs().max()
    assert split_err <= 2 * eager_err + 1e-3, (split_err, eager_err)
    assert split_err < 0.05


@pytest.mark.parametrize("visible,past,heads", CASES[::2])
def test_registered_functions_equal_eager(visible, past, heads):
    """Both registered functions, called as transformers calls them, with the [1, 1, q, q] block as the mask."""
    q = visible.shape[0]
    query, key, value = _qkv(q, past, *heads, torch.float32, seed=3 * q + past)
    module = nn.Module().eval()
    want = _eager(query, key, value, visible, 0.3)
    for forward in (split_attention_forward, flex_attention_forward):
        got, weights = forward(module, query, key, value, visible[None, None], scaling=0.3, dropout=0.0)
        assert weights is None and got.shape == want.shape
        torch.testing.assert_close(got, want, atol=2e-6, rtol=1e-5)


def test_no_mask_means_causal_with_or_without_cache():
    """A prefill (mask None) is causal; with cached keys the prefix is fully visible."""
    module = nn.Module().eval()
    for past in (0, 5):
        query, key, value = _qkv(7, past, 4, 2, torch.float32, seed=past)
        want = _eager(query, key, value, torch.ones(7, 7, dtype=torch.bool).tril(), 0.25)
        for forward in (split_attention_forward, flex_attention_forward):
            got, _ = forward(module, query, key, value, None, scaling=0.25)
            torch.testing.assert_close(got, want, atol=2e-6, rtol=1e-5)


def test_functions_refuse_what_they_do_not_compute():
    module = nn.Module().eval()
    query, key, value = _qkv(3, 4, 2, 2, torch.float32, seed=0)
    wrong = torch.ones(1, 1, 3, 5, dtype=torch.bool)  # neither [q, q] nor [q, past + q]
    for forward in (split_attention_forward, flex_attention_forward):
        with pytest.raises(ValueError, match=r"bool \[1, 1, 3, 3\] or \[1, 1, 3, 7\]"):
            forward(module, query, key, value, wrong)
        with pytest.raises(ValueError, match="softcap"):
            forward(module, query, key, value, None, softcap=30.0)
        with pytest.raises(ValueError, match="eval"):
            forward(module, query, key, value, None, dropout=0.1)


@pytest.mark.parametrize("attention", ["split", "flex"])
@pytest.mark.parametrize("arch", ["llama", "gpt2", "qwen3", "gpt_neox"])
def test_greedy_equals_plain_greedy_with_each_path(arch, attention):
    """Every path decodes token for token like plain greedy; the model reads its own implementation after.
    ("auto" on eager/sdpa models is "mask", which test_exactness covers with the default config.)"""
    model = tiny_model(arch, "eager" if arch == "gpt2" else "sdpa")
    before = model.config._attn_implementation
    config = lade.LookaheadConfig(window_size=4, ngram_size=3, guess_set_size=4, attention=attention)
    for i in range(2):
        ids = random_prompt(300 + i, length=40 if i == 0 else 20, repeat=i == 0)
        want = model.generate(ids, attention_mask=torch.ones_like(ids), **GREEDY)
        assert torch.equal(lade.generate(model, ids, config, **GREEDY), want), f"prompt {i}"
        assert model.config._attn_implementation == before


def _flash_configured(arch: str = "llama"):
    """A model whose config says flash_attention_2, as loading with attn_implementation="flash_attention_2"
    leaves it. Without the flash-attn package transformers refuses set_attn_implementation("flash_attention_2")
    and the model's own forward fails, so only lade's split path can run it here."""
    model = tiny_model(arch, "sdpa")
    reference = tiny_model(arch, "sdpa")  # same seed, same weights
    model.config._attn_implementation = "flash_attention_2"
    return model, reference


def test_flash_attention_2_model_is_routed_to_split_and_decodes_exactly():
    model, reference = _flash_configured()
    assert choose_attention("auto", model) == "split"
    for i in range(2):
        ids = random_prompt(400 + i)
        want = reference.generate(ids, attention_mask=torch.ones_like(ids), **GREEDY)
        out, stats = lade.generate(model, ids, lade.LookaheadConfig(window_size=4, ngram_size=3, guess_set_size=4),
                                   return_stats=True, **GREEDY)
        assert torch.equal(out, want), f"prompt {i}"
        assert model.config._attn_implementation == "flash_attention_2"
    with pytest.raises(ValueError, match="attention='auto'"):
        lade.generate(model, ids, lade.LookaheadConfig(window_size=4, ngram_size=3, guess_set_size=4, attention="mask"),
                      **GREEDY)


def test_implementation_restored_when_a_forward_raises():
    """lade's implementation is read only inside its forward: after an error there (here: a mask the function
    refuses) the model reads its own again, in this thread too."""
    model, _ = _flash_configured("qwen2")
    call = ModelCall(model, None, "split")
    with pytest.raises(ValueError, match="lade_split"):
        call._logits(torch.tensor([[3, 4]]), torch.tensor([[0, 1]]), torch.ones(1, 1, 2, 9, dtype=torch.bool), None)
    assert model.config._attn_implementation == "flash_attention_2"


def test_split_hands_the_model_only_the_step_block():
    """The mask argument of a split step is the [1, 1, q, q] block when the whole cache is visible, never
    [1, 1, q, past + q]; the registered function rejects any other shape, so the exact decoding above also proves
    transformers passed the block through."""
    model = tiny_model("llama", "sdpa")
    batch = stack_layouts([build_layout(5, torch.tensor([[7, 8, 9]]), TokenTree([(1, 2)]), CPU)])
    for name, shape in (("split", (1, 1, 6, 6)), ("flex", (1, 1, 6, 6)), ("mask", (1, 1, 6, 506))):
        assert tuple(ModelCall(model, None, name).attention.step_mask(batch, 500, None, model.dtype).shape) == shape


def test_models_outside_the_attention_interface_get_a_clear_error():
    class Legacy(LlamaForCausalLM):
        _can_set_attn_implementation_cached_value = False  # as transformers finds for non-interface code

    model = Legacy(tiny_model("llama").config).eval()
    for attention in ("split", "flex"):
        with pytest.raises(ValueError, match="AttentionInterface"):
            lade.generate(model, random_prompt(0), lade.LookaheadConfig(attention=attention), **GREEDY)
    assert choose_attention("auto", model) == "mask"


def test_config_rejects_unknown_attention():
    with pytest.raises(ValueError, match="attention must be one of"):
        lade.LookaheadConfig(attention="flash")


def test_mask_path_reads_grouped_heads_in_place_with_the_logits_of_transformers_sdpa(monkeypatch):
    """sdpa models run lade's masked steps under lade_sdpa: on CPU the grouped key/value heads are read in place
    (no repeat_kv copy of the cache per layer) and the logits are transformers' sdpa's; eager models and models
    outside the AttentionInterface keep their own implementation."""
    import transformers.integrations.sdpa_attention as sdpa

    copies = []
    real_repeat = sdpa.repeat_kv
    monkeypatch.setattr(sdpa, "repeat_kv", lambda *args: copies.append(1) or real_repeat(*args))
    model = tiny_model("llama", "sdpa")  # 4 heads over 2 kv heads
    prompt = random_prompt(7, length=30)
    batch = stack_layouts([build_layout(5, torch.tensor([[7, 8, 9], [3, 4, 6]]), TokenTree([(1, 2), (1, 4)]), CPU)])
    logits = {}
    for name in ("lade_sdpa", None):
        call = ModelCall(model, DynamicCache(config=model.config), "mask")
        assert call.attention.implementation == "lade_sdpa"
        call.attention.implementation = name
        call.prefill(prompt)
        copies.clear()
        logits[name] = call.step(batch, torch.tensor([30]), 30, None)
        assert bool(copies) == (name is None)
        assert model.config._attn_implementation == "sdpa"
    torch.testing.assert_close(logits["lade_sdpa"], logits[None], rtol=0, atol=1e-5)
    assert ModelCall(tiny_model("llama", "eager"), None, "mask").attention.implementation is None

    class Legacy(LlamaForCausalLM):
        _can_set_attn_implementation_cached_value = False

    assert ModelCall(Legacy(model.config).eval(), None, "mask").attention.implementation is None
