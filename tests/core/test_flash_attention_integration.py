"""transformers' own FlashAttention-2 integration, run on CPU against an exact stand-in for the flash-attn kernel.

The stand-in replaces the two flash-attn 2 functions transformers calls (flash_attn_func, flash_attn_varlen_func,
with flash-attn 2.8's signatures) by the same mathematics in torch; everything else is transformers' own code:
loading with attn_implementation="flash_attention_2", integrations/flash_attention.py, and
modeling_flash_attention_utils.py (its 2-D padding masks, unpadding to cu_seqlens and the varlen call, the kwargs it
maps, sliding windows, re-padding). The CUDA kernel itself does not run here (it takes fp16/bf16 on a GPU only).

The flash-attn rules the stand-in follows: q [B, Sq, H, D], k/v [B, Sk, Hkv, D], head h reading kv head
h // (H / Hkv); `causal` aligned to the bottom right (query i sees key j <= i + Sk - Sq); window_size (left, right)
around that diagonal, -1 unbounded; softcap * tanh(scores / softcap) when softcap > 0; a query that sees no key
gives zeros.

Oracle: plain generate of the same model under that integration (itself checked against the same weights under
sdpa). lade runs such a model on its split path (lade_split for every forward of its own loop; transformers' loop,
with flash-attention, where "auto" hands a batch over).
"""

from __future__ import annotations

import sys
import types
from functools import wraps

import pytest
import torch
import transformers.modeling_flash_attention_utils as fa_utils
from transformers import PreTrainedModel

import lade
from lade.attention import kernels
from lade.attention.choice import choose_attention
from lade.attention.interface import flex_attention_forward, split_attention_forward
from tiny_models import COMMON, random_prompt, tiny_model

PAD = COMMON["pad_token_id"]
GREEDY = dict(do_sample=False, max_new_tokens=16, pad_token_id=PAD, eos_token_id=None)
BEAMS = dict(do_sample=False, num_beams=3, max_new_tokens=10, pad_token_id=PAD)
FIXED = lade.LookaheadConfig(window_size=4, ngram_size=3, guess_set_size=4)
DRAFTS_PAY = lambda q: 1.0 + 1e-4 * q  # noqa: E731  an injected latency model under which "auto" drafts
DRAFTS_COST = lambda q: 1.0 + 0.5 * q  # noqa: E731  ... and one under which "auto" hands a batch to transformers
FAMILIES = {"llama": {}, "mistral": dict(sliding_window=96)}  # mistral: a window these calls stay below


# -- the stand-in ------------------------------------------------------------------------------------------------------

def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, causal: bool,
            window: tuple[int, int], softcap: float) -> tuple[torch.Tensor, torch.Tensor]:
    """One sequence: q [Sq, H, D], k/v [Sk, Hkv, D] -> (out [Sq, H, Dv] in q's dtype, lse [H, Sq] fp32)."""
    sq, h, _ = q.shape
    sk, hkv = k.shape[:2]
    grouped = q.float().reshape(sq, hkv, h // hkv, -1).permute(1, 2, 0, 3)  # [Hkv, r, Sq, D]
    scores = grouped @ k.float().permute(1, 2, 0).unsqueeze(1) * scale  # [Hkv, r, Sq, Sk]
    if softcap > 0:
        scores = softcap * torch.tanh(scores / softcap)
    offset = torch.arange(sk)[None, :] - torch.arange(sq)[:, None] - (sk - sq)  # [Sq, Sk]: key minus diagonal
    left, right = window
    right = 0 if causal else right
    visible = torch.ones(sq, sk, dtype=torch.bool)  # [Sq, Sk]
    if right >= 0:
        visible &= offset <= right
    if left >= 0:
        visible &= offset >= -left
    scores = scores.masked_fill(~visible, float("-inf"))
    lse = scores.logsumexp(-1)  # [Hkv, r, Sq]
    probs = (scores - lse.unsqueeze(-1)).exp().nan_to_num(0.0)  # a row that sees nothing: zeros
    out = probs @ v.float().permute(1, 0, 2).unsqueeze(1)  # [Hkv, r, Sq, Dv]
    return out.permute(2, 0, 1, 3).reshape(sq, h, -1).to(q.dtype), lse.reshape(h, sq)


def _refuse(dropout_p: float, alibi_slopes, block_table=None) -> None:
    if dropout_p or alibi_slopes is not None or block_table is not None:
        raise NotImplementedError("the stand-in computes inference attention without ALiBi or paged KV")


def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                    alibi_slopes=None, deterministic=False, return_attn_probs=False):
    """q [B, Sq, H, D], k/v [B, Sk, Hkv, D] -> out [B, Sq, H, Dv] (return_attn_probs: out, lse [B, H, Sq], None)."""
    _refuse(dropout_p, alibi_slopes)
    scale = softmax_scale if softmax_scale is not None else q.shape[-1] ** -0.5
    parts = [_attend(q[b], k[b], v[b], scale, causal, tuple(window_size), softcap) for b in range(q.shape[0])]
    out, lse = torch.stack([p[0] for p in parts]), torch.stack([p[1] for p in parts])
    return (out, lse, None) if return_attn_probs else out


def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                           softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0, alibi_slopes=None,
                           deterministic=False, return_attn_probs=False, block_table=None):
    """Sequences packed without padding: q [total_q, H, D], k/v [total_k, Hkv, D], sequence i at
    cu_seqlens[i]:cu_seqlens[i + 1] -> out [total_q, H, Dv] (return_attn_probs: out, lse [H, total_q], None)."""
    _refuse(dropout_p, alibi_slopes, block_table)
    scale = softmax_scale if softmax_scale is not None else q.shape[-1] ** -0.5
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    assert max(b - a for a, b in zip(cq, cq[1:])) <= max_seqlen_q and max(b - a for a, b in zip(ck, ck[1:])) <= \
        max_seqlen_k, "a sequence is longer than max_seqlen"
    parts = [_attend(q[cq[i]:cq[i + 1]], k[ck[i]:ck[i + 1]], v[ck[i]:ck[i + 1]], scale, causal, tuple(window_size),
                     softcap) for i in range(len(cq) - 1)]
    out, lse = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts], dim=1)
    return (out, lse, None) if return_attn_probs else out


class Calls:
    """How often transformers called each stand-in function: which of its paths ran."""

    def __init__(self) -> None:
        self.dense = self.varlen = 0
        self.windows: set[tuple[int, int]] = set()  # the window_size arguments transformers passed

    def count(self) -> tuple[int, int]:
        return self.dense, self.varlen


@pytest.fixture
def fa2(monkeypatch) -> Calls:
    """transformers takes the stand-in for the flash-attn package: its import of flash-attn's functions
    (`_lazy_imports`) returns them with transformers' own pad/unpad helpers (its equivalents of
    flash_attn.bert_padding), and its availability check (flash-attn installed, weights on a GPU) passes. The
    functions it caches lazily start empty and are restored after the test."""
    calls = Calls()

    @wraps(flash_attn_func)  # the signature stays: transformers reads it to decide which kwargs it passes
    def dense(*args, **kwargs):
        calls.dense += 1
        calls.windows.add(tuple(kwargs.get("window_size", (-1, -1))))
        return flash_attn_func(*args, **kwargs)

    @wraps(flash_attn_varlen_func)
    def varlen(*args, **kwargs):
        calls.varlen += 1
        calls.windows.add(tuple(kwargs.get("window_size", (-1, -1))))
        return flash_attn_varlen_func(*args, **kwargs)

    monkeypatch.setattr(fa_utils, "_lazy_imports", lambda *args, **kwargs: (
        dense, varlen, None, fa_utils._pad_input, fa_utils._unpad_input))
    for name in ("_loaded_implementation", "_flash_fn", "_flash_varlen_fn", "_flash_with_kvcache_fn", "_pad_fn",
                 "_unpad_fn", "_process_flash_kwargs_fn", "_process_with_kvcache_kwargs_fn"):
        monkeypatch.setattr(fa_utils, name, None)
    monkeypatch.setattr(PreTrainedModel, "_flash_attn_can_dispatch", lambda self, *args, **kwargs: True)
    return calls


def flash_model(arch: str, **overrides):
    """A tiny model loaded with attn_implementation="flash_attention_2" (through transformers' own check and
    lazy import), and the same weights under sdpa."""
    model = tiny_model(arch, "sdpa", **overrides)
    model.set_attn_implementation("flash_attention_2")
    assert model.config._attn_implementation == "flash_attention_2"
    return model, tiny_model(arch, "sdpa", **overrides)


def latency(config) -> dict:
    """"auto" drafts under an injected latency model (no measurement); fixed configs take none."""
    return {"lookahead_latency": DRAFTS_PAY} if config == "auto" else {}


def padded_batch() -> tuple[torch.Tensor, torch.Tensor]:
    return lade.left_pad([random_prompt(s, length=10 + 6 * s)[0] for s in range(3)], PAD)


# -- 1. the stand-in is exact attention --------------------------------------------------------------------------------

def _sdpa(q, k, v, visible: torch.Tensor) -> torch.Tensor:
    """Reference: q [Sq, H, D], k/v [Sk, Hkv, D], visible [Sq, Sk] bool -> [Sq, H, D] through torch's SDPA."""
    out = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), attn_mask=visible, enable_gqa=True)
    return out.transpose(0, 1)


@pytest.mark.parametrize("sq, sk, causal, window", [
    (9, 9, True, (-1, -1)),  # a prefill
    (3, 11, True, (-1, -1)),  # a step after a cache: causal aligned to the bottom right
    (5, 7, False, (-1, -1)),
    (12, 12, True, (3, 3)),  # a sliding window (transformers passes (w - 1, w - 1) with causal)
    (4, 12, True, (5, 5)),
])
def test_standin_equals_sdpa(sq, sk, causal, window):
    g = torch.Generator().manual_seed(sq * 100 + sk)
    q, k, v = (torch.randn(2, n, h, 8, generator=g) for n, h in ((sq, 4), (sk, 2), (sk, 2)))  # grouped heads
    visible = torch.ones(sq, sk, dtype=torch.bool).tril(sk - sq) if causal else torch.ones(sq, sk, dtype=torch.bool)
    if window[0] >= 0:
        visible &= torch.ones(sq, sk, dtype=torch.bool).triu(sk - sq - window[0])
    out, lse, _ = flash_attn_func(q, k, v, causal=causal, window_size=window, return_attn_probs=True)
    for b in range(2):
        torch.testing.assert_close(out[b], _sdpa(q[b], k[b], v[b], visible), rtol=1e-5, atol=1e-6)
        scores = torch.einsum("qhd,khd->hqk", q[b], k[b].repeat_interleave(2, dim=1)) * 8 ** -0.5
        torch.testing.assert_close(lse[b], scores.masked_fill(~visible, float("-inf")).logsumexp(-1))


def test_standin_varlen_equals_each_sequence_alone_and_zeros_rows_that_see_nothing():
    g = torch.Generator().manual_seed(1)
    lengths_q, lengths_k = [3, 1, 6], [7, 4, 6]
    q, k, v = torch.randn(10, 4, 8, generator=g), torch.randn(17, 2, 8, generator=g), torch.randn(17, 2, 8, generator=g)
    cu_q, cu_k = (torch.tensor([0, *torch.tensor(n).cumsum(0).tolist()], dtype=torch.int32)
                  for n in (lengths_q, lengths_k))
    out = flash_attn_varlen_func(q, k, v, cu_q, cu_k, 6, 7, causal=True)
    for i in range(3):
        a, b = slice(cu_q[i], cu_q[i + 1]), slice(cu_k[i], cu_k[i + 1])
        alone = flash_attn_func(q[None, a], k[None, b], v[None, b], causal=True)[0]
        assert torch.equal(out[a], alone)
    # more queries than keys under causal: the first queries see no key and give zeros, as flash-attn does
    early = flash_attn_func(q[None, :5], k[None, :2], v[None, :2], causal=True)[0]
    assert torch.equal(early[:3], torch.zeros_like(early[:3])) and early[3:].abs().sum() > 0


# -- 2. transformers' integration through the stand-in is the model's own attention ------------------------------------

@pytest.mark.parametrize("arch, overrides", [("llama", {}), ("mistral", dict(sliding_window=12))])
def test_transformers_flash_attention_2_decodes_as_sdpa(fa2, arch, overrides):
    """One prompt runs transformers' dense flash call; a left-padded batch its unpadding and varlen call; mistral's
    window of 12 is crossed, so flash's window_size is used. Same weights under sdpa: same tokens."""
    model, sdpa = flash_model(arch, **overrides)
    ids = random_prompt(1)
    assert torch.equal(model.generate(ids, attention_mask=torch.ones_like(ids), **GREEDY),
                       sdpa.generate(ids, attention_mask=torch.ones_like(ids), **GREEDY))
    assert fa2.count() == (2 * 16, 0)  # 2 layers x 16 forwards, no padding: flash_attn_func
    ids, mask = padded_batch()
    assert torch.equal(model.generate(ids, attention_mask=mask, **GREEDY),
                       sdpa.generate(ids, attention_mask=mask, **GREEDY))
    assert fa2.varlen > 0  # padding: unpadded, through flash_attn_varlen_func (until a sliding cache drops it)
    assert fa2.windows == ({(-1, -1), (11, 11)} if overrides else {(-1, -1)})


# -- 3. lade on a flash_attention_2 model ------------------------------------------------------------------------------

@pytest.mark.parametrize("arch", FAMILIES)
def test_lade_greedy_equals_plain_flash_attention_2_generate(fa2, arch):
    """Fixed configs and "auto" (drafting, under an injected latency model), one prompt and a left-padded batch: the
    tokens of plain generate under transformers' flash-attention. lade's own forwards all run lade_split (the cache
    prefix through a fused kernel, the step block under the tree mask, merged by log-sum-exp): no flash call."""
    model, _ = flash_model(arch, **FAMILIES[arch])
    assert choose_attention("auto", model) == "split"
    single = random_prompt(2, length=30)
    for ids, mask in ((single, torch.ones_like(single)), padded_batch()):
        want = model.generate(ids, attention_mask=mask, **GREEDY)
        before, forwards = fa2.count(), []
        for config in (FIXED, lade.LookaheadConfig(window_size=2, ngram_size=4, guess_set_size=2), "auto"):
            out, stats = lade.generate(model, ids, config, attention_mask=mask, return_stats=True,
                                       **latency(config), **GREEDY)
            assert torch.equal(out, want), (config, ids.shape)
            assert not stats.handed_over
            forwards.append(stats.steps)
        assert min(forwards) < GREEDY["max_new_tokens"]  # drafts were accepted: steps fed trees, not single tokens
        assert fa2.count() == before
        assert model.config._attn_implementation == "flash_attention_2"


@pytest.mark.parametrize("arch", FAMILIES)
def test_lade_beam_search_equals_plain_flash_attention_2_beam_search(fa2, arch):
    model, _ = flash_model(arch, **FAMILIES[arch])
    for ids, mask in ((random_prompt(3), None), padded_batch()):
        mask = torch.ones_like(ids) if mask is None else mask
        want = model.generate(ids, attention_mask=mask, **BEAMS)
        for config in (FIXED, "auto"):
            out = lade.generate(model, ids, config, attention_mask=mask, **latency(config), **BEAMS)
            assert torch.equal(out, want), (config, ids.shape)


def test_a_handed_over_batch_runs_transformers_flash_attention_2(fa2):
    """Where "auto" finds no draft pays a batch it runs transformers' own loop: there transformers' flash-attention
    integration itself decodes under lade (unpadding and varlen every step) and gives plain generate's tokens."""
    model, _ = flash_model("llama")
    ids, mask = padded_batch()
    want = model.generate(ids, attention_mask=mask, **GREEDY)
    varlen = fa2.varlen
    out, stats = lade.generate(model, ids, "auto", attention_mask=mask, lookahead_latency=DRAFTS_COST,
                               return_stats=True, **GREEDY)
    assert stats.handed_over and torch.equal(out, want)
    assert fa2.varlen - varlen == 2 * 16


# -- 4. lade's split path through the flash-attn package's functions ---------------------------------------------------

@pytest.fixture
def flash_attn_package(monkeypatch) -> list[bool]:
    """The stand-in as the flash_attn package, and lade's prefix kernel choosing it (as on a GPU with flash-attn
    installed), so that lade's own calls of flash_attn_func (argument layout, causal prefill, returned lse) run.
    Yields the `causal` argument of each call."""
    causal: list[bool] = []

    def counted(*args, **kwargs):
        causal.append(kwargs["causal"])
        return flash_attn_func(*args, **kwargs)

    monkeypatch.setitem(sys.modules, "flash_attn", types.SimpleNamespace(flash_attn_func=counted))
    monkeypatch.setattr(kernels, "prefix_kernel", lambda query: "flash_attn")
    return causal


def test_split_prefix_through_flash_attn_equals_the_exact_prefix(flash_attn_package):
    g = torch.Generator().manual_seed(2)
    q, k, v = torch.randn(2, 4, 5, 8, generator=g), torch.randn(2, 2, 13, 8, generator=g), torch.randn(2, 2, 13, 8,
                                                                                                          generator=g)
    out, lse = kernels.prefix_attention(q, k, v, 0.3)
    want, want_lse = kernels.prefix_attention(q, k, v, 0.3, kernel="math")
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(lse, want_lse)
    assert flash_attn_package == [False]


@pytest.mark.parametrize("arch", FAMILIES)
def test_lade_split_through_flash_attn_equals_plain_flash_attention_2_generate(fa2, flash_attn_package, arch):
    model, _ = flash_model(arch, **FAMILIES[arch])
    ids = random_prompt(4, length=30)
    want = model.generate(ids, attention_mask=torch.ones_like(ids), **GREEDY)
    assert torch.equal(lade.generate(model, ids, FIXED, **GREEDY), want)
    assert {True, False} <= set(flash_attn_package)  # the causal prefill and the unmasked cache prefix of each step


# -- 5. lade_split, lade_flex and a sliding window ---------------------------------------------------------------------

@pytest.mark.parametrize("forward", [split_attention_forward, flex_attention_forward])
def test_a_sliding_window_wider_than_the_keys_is_computed_and_a_narrower_one_refused(forward):
    """Below its window a sliding-window layer sees every key (lade.windows keeps lade's calls there), so lade_split
    and lade_flex compute it exactly; a window the forward's keys reach is refused, never dropped."""
    g = torch.Generator().manual_seed(3)
    q, k, v = torch.randn(1, 4, 3, 8, generator=g), torch.randn(1, 2, 10, 8, generator=g), torch.randn(1, 2, 10, 8,
                                                                                                         generator=g)
    block = torch.ones(1, 1, 3, 3, dtype=torch.bool).tril()
    plain = forward(None, q, k, v, block)[0]
    assert torch.equal(forward(None, q, k, v, block, sliding_window=10)[0], plain)
    with pytest.raises(ValueError, match="sliding window narrower than its keys"):
        forward(None, q, k, v, block, sliding_window=9)
