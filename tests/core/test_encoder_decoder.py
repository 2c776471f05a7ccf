"""Encoder-decoder lookahead: greedy output equals plain `model.generate(do_sample=False)` token for token
for seven families, through their position adapters, which leave the model exactly as it was."""

import contextlib

import pytest
import torch
from transformers import BlenderbotSmallConfig, BlenderbotSmallForConditionalGeneration
from transformers.cache_utils import DynamicCache, EncoderDecoderCache

import lade
import lade.adapters
from distribution import first_two_pvalues
from greedy_runs import most_accepted
from lade.encoder_decoder import EncoderDecoderCall
from lade.layout import build_layout
from lade.tree import TokenTree
from tiny_models import forward_all_rows, random_prompt
from tiny_seq2seq import FAMILIES, tiny_seq2seq

CONFIGS = [
    lade.LookaheadConfig(window_size=4, ngram_size=3, guess_set_size=4),
    lade.LookaheadConfig(window_size=1, ngram_size=2, guess_set_size=0),
    lade.LookaheadConfig(window_size=3, ngram_size=2, guess_set_size=2),
    lade.LookaheadConfig(window_size=2, ngram_size=5, guess_set_size=40),
    lade.LookaheadConfig(window_size=0, ngram_size=5, guess_set_size=2, pool_capacity=8),
    lade.LookaheadConfig(window_size=5, ngram_size=4, guess_set_size=5, pool_from_prompt=False),
]
GREEDY = dict(do_sample=False, max_new_tokens=24, eos_token_id=None)
CFG = CONFIGS[0]


def plain(model, ids, **kw):
    return model.generate(ids, attention_mask=torch.ones_like(ids), **{**GREEDY, **kw})


def patched_attributes(model) -> list[dict]:
    """The instance attributes an adapter may replace, per module (empty when nothing is patched)."""
    names = ("forward", "_relative_position_bucket")
    return [{n: m.__dict__[n] for n in names if n in m.__dict__} for m in model.get_decoder().modules()]


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_greedy_equals_plain_greedy(family, attn):
    """20 prompts (half with repeated spans, one long) cycling through the configs; some step must accept
    several tokens, or verification would not be tested."""
    assert most_accepted(tiny_seq2seq(family, attn), CONFIGS, GREEDY, long=100, short=16) >= 3


def step_error(model, seed: int) -> float:
    """Largest logit difference, relative to the logits' scale, between one lookahead step (after a prefill)
    and plain causal forwards of the token sequence each step row sees (its visible step tokens follow the
    cache at consecutive positions)."""
    g = torch.Generator().manual_seed(seed)
    ids = random_prompt(seed)  # encoder input [1, 24]
    encoder_outputs = model.get_encoder()(input_ids=ids)
    prefix = torch.cat([torch.tensor([[1]]), torch.randint(3, 96, (1, 6), generator=g)], dim=1)  # [1, 7]
    cache = EncoderDecoderCache(DynamicCache(config=model.config), DynamicCache(config=model.config))
    call = EncoderDecoderCall(model, cache, "mask", encoder_outputs, None)
    call.prefill(prefix[:, :-1])
    window = torch.randint(3, 96, (2, 4), generator=g)  # [L, W]
    a, b, c = torch.randint(3, 96, (3,), generator=g).tolist()
    layout = build_layout(int(prefix[0, -1]), window, TokenTree([(a, b, c), (a, c), (b, a)]), ids.device)
    with torch.no_grad():
        logits = forward_all_rows(call, layout, prefix.shape[1] - 1)  # [q, V]
        error = 0.0
        for row in range(layout.size):
            seen = layout.input_ids[0, layout.visible[row]]  # the step tokens row sees, in order
            decoder_ids = torch.cat([prefix[:, :-1], seen.unsqueeze(0)], dim=1)
            want = model(encoder_outputs=encoder_outputs, decoder_input_ids=decoder_ids).logits[0, -1]
            error = max(error, ((logits[row] - want).abs().max() / want.abs().max()).item())
    return error


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_step_logits_equal_plain_forwards_only_with_adapter(family, monkeypatch):
    """Every row of a lookahead step (window, tree) gives the logits of a plain forward of what it sees.
    With a do-nothing adapter the decoder places the step's tokens one after another and the logits are
    wrong: the exactness tests really depend on the adapter."""
    model = tiny_seq2seq(family, "eager")
    assert max(step_error(model, seed) for seed in range(2)) < 1e-4  # fp32 reduction order only
    monkeypatch.setitem(lade.adapters.ADAPTERS, family, lambda decoder, positions: contextlib.nullcontext())
    assert min(step_error(model, seed) for seed in range(2)) > 1e-2


def _cuts_inside_multi_token_steps(stats: lade.LookaheadStats) -> list[int]:
    """Numbers of new tokens that end strictly inside a step that emitted several tokens."""
    cuts, emitted = [], 0
    for accepted in stats.accepted_per_step:
        cuts += range(emitted + 1, emitted + accepted)
        emitted += accepted
    return cuts


@pytest.mark.parametrize("family", ["bart", "t5"])
def test_eos_and_max_length_mid_step(family):
    """Cutting inside a multi-token step (by max_new_tokens, or by an EOS id that first appears there)
    stops exactly where plain decoding stops."""
    model = tiny_seq2seq(family, "sdpa")
    eos_cuts = 0
    for i in range(6):
        ids = random_prompt(300 + i)
        full, stats = lade.generate(model, ids, CFG, return_stats=True, **GREEDY)
        cuts = _cuts_inside_multi_token_steps(stats)  # full[0, 0] is the decoder start id
        out = lade.generate(model, ids, CFG, **{**GREEDY, "max_new_tokens": cuts[0]})
        assert torch.equal(out, plain(model, ids, max_new_tokens=cuts[0])) and out.shape[1] == cuts[0] + 1
        first_seen = [c for c in cuts if int(full[0, c]) not in full[0, 1:c].tolist()]
        if first_seen:
            eos = int(full[0, first_seen[0]])
            out = lade.generate(model, ids, CFG, **{**GREEDY, "eos_token_id": eos})
            assert torch.equal(out, plain(model, ids, eos_token_id=eos)) and out.shape[1] == first_seen[0] + 1
            eos_cuts += 1
    assert eos_cuts >= 2


@pytest.mark.parametrize("family", ["marian", "umt5"])
def test_model_generate_custom_generate_and_dict_output(family):
    model = tiny_seq2seq(family, "sdpa")
    ids = random_prompt(11)
    kw = dict(return_dict_in_generate=True, output_scores=True, repetition_penalty=1.3)
    ref = plain(model, ids, **kw)
    out = model.generate(ids, attention_mask=torch.ones_like(ids), custom_generate=lade.lookahead_generate,
                         lookahead_config=CFG, **GREEDY, **kw)
    assert isinstance(out, lade.LookaheadEncoderDecoderOutput)
    assert torch.equal(out.sequences, ref.sequences)
    assert len(out.scores) == len(ref.scores) == GREEDY["max_new_tokens"]
    for got, want in zip(out.scores, ref.scores):
        torch.testing.assert_close(got, want, atol=1e-4 * want.abs().max().item(), rtol=1e-4)  # fp32, T5 logits ~1e2
    assert out.lookahead_stats.new_tokens == GREEDY["max_new_tokens"]


class _FailOnCall:
    """A forward hook on a decoder layer that raises on its n-th call (inside a patched step)."""

    def __init__(self, n: int) -> None:
        self.left = n

    def __call__(self, module, args, output):
        self.left -= 1
        if self.left == 0:
            raise RuntimeError("injected failure")


@pytest.mark.parametrize("family", ["mbart", "pegasus", "mt5"])
def test_adapter_leaves_model_as_it_was(family):
    """After a lade generate, and after one that raised inside a step, no instance attribute is left
    patched and plain generate gives the same output as before."""
    model = tiny_seq2seq(family, "eager")
    ids = random_prompt(21)
    before, attrs = plain(model, ids), patched_attributes(model)
    assert all(not a for a in attrs)
    lade.generate(model, ids, CFG, **GREEDY)
    assert patched_attributes(model) == attrs
    assert torch.equal(plain(model, ids), before)

    layer = model.get_decoder().layers[0] if hasattr(model.get_decoder(), "layers") else model.get_decoder().block[0]
    handle = layer.register_forward_hook(_FailOnCall(3))  # prefill, step 1, fails in step 2
    try:
        with pytest.raises(RuntimeError, match="injected failure"):
            lade.generate(model, ids, CFG, **GREEDY)
    finally:
        handle.remove()
    assert patched_attributes(model) == attrs
    assert torch.equal(plain(model, ids), before)


@pytest.mark.parametrize("family", ["bart", "t5", "umt5"])
def test_adapter_patches_only_inside_the_block(family):
    """Inside the block the decoder places its tokens at the adapter's positions (all at 0 here, so the logits change),
    through its class in this thread only (lade.scoped), never by setting an instance attribute; after the block (also
    one left by an exception) it computes its own positions again."""
    model = tiny_seq2seq(family, "eager")
    decoder = model.get_decoder()
    adapter = lade.adapters.adapter_for(model)
    source, target = random_prompt(5, length=8), torch.tensor([[1, 7, 8, 9, 10]])

    def logits():
        return model(input_ids=source, decoder_input_ids=target).logits

    own = logits()
    with adapter(decoder, torch.zeros(5, dtype=torch.long)):
        assert not torch.allclose(logits(), own)
        assert not any(patched_attributes(model))
    with pytest.raises(KeyError), adapter(decoder, torch.arange(5)):
        raise KeyError("inside")
    assert torch.equal(logits(), own)
    assert not any(patched_attributes(model))


def test_unsupported_encoder_decoder_type_is_named():
    config = BlenderbotSmallConfig(vocab_size=96, d_model=32, encoder_layers=1, decoder_layers=1,
                                   encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                                   decoder_ffn_dim=64, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                   decoder_start_token_id=1)
    model = BlenderbotSmallForConditionalGeneration(config).eval()
    with pytest.raises(ValueError, match="'blenderbot-small' has no lade position adapter"):
        lade.generate(model, random_prompt(0), CFG, **GREEDY)


def test_sampling_is_lossless_on_bart():
    """do_sample on BART: the first two decoder tokens follow plain sampling's exact joint distribution
    (chi-square, p = 1e-3), with the source's n-grams drafting the second token."""
    model = tiny_seq2seq("bart", vocab_size=8)
    with torch.no_grad():
        model.lm_head.weight.mul_(6.0)
    source = torch.tensor([[3, 4, 5, 3, 4, 5, 6, 2]])
    start = torch.tensor([model.config.decoder_start_token_id])
    cfg = lade.LookaheadConfig(window_size=2, ngram_size=3, guess_set_size=4)
    torch.manual_seed(0)

    def conditional(prefixes):  # decoder prefixes [B, S] -> [B, V]
        return model(input_ids=source.expand(len(prefixes), -1), decoder_input_ids=prefixes).logits[:, -1].softmax(-1)

    def draw():
        out = lade.generate(model, source, cfg, do_sample=True, top_k=0, max_new_tokens=2, min_new_tokens=0,
                            eos_token_id=None, forced_bos_token_id=None, forced_eos_token_id=None)
        return out[:, 1:]

    assert first_two_pvalues(conditional, [start], draw, samples=1500)[0] > 1e-3
