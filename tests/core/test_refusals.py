"""The catalogue of what lade refuses: every refusal the README promises, as (input, exception type, words the
message must contain), each raised before any model forward and before any streamer call. The README's list
("What lade refuses") must name exactly the rules below."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import transformers
from transformers import BlenderbotSmallConfig, BlenderbotSmallForConditionalGeneration, LogitsProcessor
from transformers.generation.logits_process import LogitsProcessorList
from transformers.generation.stopping_criteria import StoppingCriteria, StoppingCriteriaList
from transformers.models.llama.modeling_llama import LlamaForCausalLM

import lade
from lade import quantization
from tiny_models import RecordingStreamer, char_tokenizer, random_prompt, tiny_model
from tiny_seq2seq import tiny_seq2seq

README = Path(__file__).resolve().parents[2] / "README.md"
GREEDY = dict(do_sample=False, max_new_tokens=8, eos_token_id=None)
CFG = lade.LookaheadConfig(window_size=4, ngram_size=3, guess_set_size=4)


class Stateful(LogitsProcessor):
    def __call__(self, input_ids, scores):
        return scores


class StopAfter(StoppingCriteria):
    def __call__(self, input_ids, scores, **kwargs):
        return input_ids[:, -1] == 5


class Legacy(LlamaForCausalLM):
    _can_set_attn_implementation_cached_value = False  # as transformers finds for code outside AttentionInterface


@dataclass
class Case:
    rule: str  # the README bullet this case belongs to
    name: str
    call: Callable  # (model, streamer) -> anything; the refusal must come from this call
    error: type[Exception]
    words: str  # regular expression the message must match
    model: Callable = lambda: tiny_model("llama")


def mamba():
    return transformers.MambaForCausalLM(transformers.MambaConfig(vocab_size=96, hidden_size=32, num_hidden_layers=2,
                                                                  state_size=4)).eval()


def jamba():
    return transformers.JambaForCausalLM(transformers.JambaConfig(
        vocab_size=96, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=64, attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2, num_experts=2,
        mamba_d_state=4)).eval()


def batch():
    return lade.left_pad([random_prompt(1)[0], random_prompt(2, length=9)[0]], 0)


def one():
    return random_prompt(3)


def with_mask(values) -> tuple[torch.Tensor, torch.Tensor]:
    ids = one()
    return ids, torch.as_tensor(values).expand_as(ids).clone()


def decode(ids=None, config=CFG, stream=True, **kw):
    """(model, streamer) -> lade.generate(model, ids, config, streamer=streamer if stream, **kw)"""
    return lambda model, streamer: lade.generate(model, one() if ids is None else ids, config,
                                                 streamer=streamer if stream else None, **{**GREEDY, **kw})


def through_generate(**kw):
    """(model, streamer) -> model.generate(..., custom_generate=lade.lookahead_generate)"""
    return lambda model, streamer: model.generate(**{"input_ids": one(), **kw}, custom_generate=lade.lookahead_generate,
                                                  lookahead_config=CFG, **GREEDY)


def config(**fields):
    return lambda model, streamer: lade.LookaheadConfig(**fields)


def meta_model():
    with torch.device("meta"):
        return tiny_model("llama")


def own_loop_model():
    """A tiny llama whose class replaces transformers' decoding loop (as CSM and Higgs Audio do)."""
    model = tiny_model("llama")
    model.__class__ = type("OwnLoop", (type(model),), {"_sample": lambda self, *args, **kwargs: None})
    return model


def quantized(method: str):
    model = tiny_model("llama")
    model.config.quantization_config = {"quant_method": method}
    return model


def missing_backend(model, streamer):
    saved = quantization._installed
    quantization._installed = lambda package: False
    try:
        return decode()(model, streamer)
    finally:
        quantization._installed = saved


def flex_configured():
    model = tiny_model("llama")
    model.config._attn_implementation = "flex_attention"
    return model


def bart_decoder():
    return transformers.BartForCausalLM(transformers.BartConfig(
        vocab_size=96, d_model=32, decoder_layers=2, decoder_attention_heads=4, decoder_ffn_dim=64, encoder_layers=2,
        encoder_attention_heads=4, encoder_ffn_dim=64)).eval()


def imagegpt():
    return transformers.ImageGPTForCausalImageModeling(transformers.ImageGPTConfig(
        vocab_size=97, n_embd=32, n_layer=2, n_head=4, n_positions=64)).eval()


def deepseek_v32():
    return transformers.DeepseekV32ForCausalLM(transformers.DeepseekV32Config(
        vocab_size=96, hidden_size=32, intermediate_size=64, moe_intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=4, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8,
        kv_lora_rank=16, q_lora_rank=16, n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1,
        mlp_layer_types=["dense", "sparse"])).eval()


def blenderbot():
    config_ = BlenderbotSmallConfig(vocab_size=96, d_model=32, encoder_layers=1, decoder_layers=1,
                                    encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                                    decoder_ffn_dim=64, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                    decoder_start_token_id=1)
    return BlenderbotSmallForConditionalGeneration(config_).eval()


def prefix_cache(length: int):
    def call(model, streamer):
        ids = one()
        cache = transformers.DynamicCache(config=model.config)
        with torch.no_grad():
            model(ids[:, :length], cache=cache, use_cache=True)
        counter.reset(model)  # the cache's own forward is the caller's, not lade's
        return lade.generate(model, ids, CFG, cache=cache, streamer=streamer, **GREEDY)
    return call


def beam_prefix_cache(model, streamer):
    ids = one()
    cache = transformers.DynamicCache(config=model.config)
    with torch.no_grad():
        model(ids[:, :4], cache=cache, use_cache=True)
    counter.reset(model)
    return lade.generate(model, ids, CFG, cache=cache, num_beams=2, **GREEDY)


def padded_prefix_cache(model, streamer):
    ids, mask = (t[1:] for t in batch())  # the shorter, left-padded prompt
    cache = transformers.DynamicCache(config=model.config)
    with torch.no_grad():
        model(ids[:, :4], cache=cache, use_cache=True)
    counter.reset(model)
    return lade.generate(model, ids, CFG, attention_mask=mask, cache=cache, streamer=streamer, pad_token_id=0,
                         **GREEDY)


def corpus_of(vocab_size: int) -> lade.Corpus:
    corpus = lade.Corpus()
    corpus.bind(vocab_size, "llama")
    return corpus


B_IDS, B_MASK = batch()
RETRIEVAL = lade.LookaheadConfig(draft="retrieval")
RULES = {
    "config": "invalid lookahead parameters (window_size, ngram_size, guess_set_size, pool settings, seeds, attention "
              "path)",
    "step": "a configuration whose step would feed more than 4096 tokens (1 + (W + G)(N - 1))",
    "value": "a lookahead_config that is not a LookaheadConfig, a dict of its fields, \"auto\" or \"auto:TASK\"",
    "ids": "input_ids that are not a non-empty 2-D tensor of torch.long or torch.int32 ids inside the model's "
           "vocabulary",
    "embeds": "inputs_embeds instead of input_ids",
    "mask": "an attention_mask of another shape than input_ids, with values other than 0 and 1, with padding "
            "anywhere but on the left, or with a row of zeros (a prompt without tokens)",
    "mode": "decoding modes other than greedy, sampling and beam search: beam sampling, diverse (group) and "
            "constrained beam search, contrastive search, DoLa, prompt lookup, assisted decoding",
    "outputs": "num_return_sequences > 1 outside beam search, output_attentions, output_hidden_states, synced_gpus",
    "beams": "with num_beams > 1: a streamer, a cache passed in, a draft other than 'lookahead', lookahead "
             "parallelism, a corpus",
    "processor": "a logits processor lade cannot apply per tree node (it keeps state or runs the model, e.g. "
                 "classifier-free guidance) unless marked lade_prefix_pure",
    "positions": "models whose forward cannot place a step's tokens at their logical positions: ALiBi (BLOOM, MPT, "
                 "Falcon with alibi=True), no position_ids (the *ForCausalLM decoders of encoder-decoder families, "
                 "XLNet), ImageGPT, Kosmos-2.5, Reformer (each message names which)",
    "loop": "models whose generate is not transformers' token-by-token loop: no GenerationMixin (DiffusionGemma's "
            "block diffusion), their own `_sample` (CSM, Higgs Audio) or their own generate loop (MusicGen)",
    "recurrent": "recurrent models (Mamba, RWKV, linear-attention or hybrid layers): their state cannot drop a step's "
                 "rejected drafts",
    "encdec": "encoder-decoder families without a position adapter; encoder-decoder models with several inputs, a "
              "padded decoder prompt or the split / flex attention path",
    "cache": "a sliding or local attention window the call reaches (max_length plus a step's tokens; below it "
             "decoding is exact); static, quantized, indexed (sparse-attention), offloaded or paged KV caches; a cache "
             "passed in with several or padded prompts, with an encoder-decoder model, or holding the whole prompt",
    "quant": "quantization methods other than bitsandbytes, AWQ and GGUF, and a missing quantization backend (names "
             "the extra to install)",
    "meta": "a model whose weights are on the meta device",
    "attention": "attention='mask' on a model whose attention implementation cannot take a 4-D mask; 'split' / "
                 "'flex' on a model outside transformers' AttentionInterface",
    "batch": "with several prompts: a streamer, prefix_allowed_tokens_fn, stop strings "
             "or custom stopping criteria without an eos_token_id",
    "stream": "stop_strings or token_healing without tokenizer=, token_healing with several or padded prompts, two "
              "streamers (streamer= and lookahead_streamer=)",
    "corpus": "corpus= that is not a lade.Corpus, holds another vocabulary's ids, or goes to a draft that cannot use "
              "it (lookahead, plain decoding, lookahead parallelism); draft='corpus' without one",
}

CASES = [
    Case("config", "negative window", config(window_size=-1), ValueError, "window_size"),
    Case("config", "N = 1", config(ngram_size=1), ValueError, "ngram_size"),
    Case("config", "pool-only without a pool", config(window_size=0, guess_set_size=0), ValueError, "window_size=0"),
    Case("config", "capacity below G", config(guess_set_size=4, pool_capacity=3), ValueError, "pool_capacity"),
    Case("config", "non-integer", config(window_size=2.5), ValueError, "window_size"),
    Case("config", "non-bool", config(pool_from_prompt="yes"), ValueError, "pool_from_prompt"),
    Case("config", "bad sampling seed", config(sampling_seed=-1), ValueError, "sampling_seed"),
    Case("config", "unknown attention path", config(attention="flash"), ValueError, "attention must be one of"),
    Case("config", "unknown draft", config(draft="medusa"), ValueError, "registered drafter, one of"),
    Case("config", "bad draft option", config(draft="recycling", draft_options=dict(recycling_width=0)), ValueError,
         "recycling_width must be"),
    Case("step", "1024, 64, 1024", config(window_size=1024, ngram_size=64, guess_set_size=1024), ValueError,
         "129025 tokens per step.*reduce window_size"),
    Case("value", "a string", decode(config="fast"), ValueError, "'auto'"),
    Case("value", "an unknown task", decode(config="auto:poetry"), ValueError, "task must be one of"),
    Case("ids", "a list", decode(ids=[[3, 4, 5]]), ValueError, "torch.LongTensor"),
    Case("ids", "1-D", decode(ids=torch.tensor([3, 4, 5])), ValueError, r"shape \[batch, length\]"),
    Case("ids", "empty", decode(ids=torch.zeros(1, 0, dtype=torch.long)), ValueError, "length >= 1"),
    Case("ids", "floats", decode(ids=torch.tensor([[3.0, 4.0]])), ValueError, "integer token ids"),
    Case("ids", "out of vocabulary", decode(ids=torch.tensor([[3, 4, 500]])), ValueError, "outside the model's vocab"),
    Case("ids", "negative", decode(ids=torch.tensor([[3, -4, 5]])), ValueError, "outside the model's vocab"),
    Case("ids", "uint8", decode(ids=torch.tensor([[3, 4, 5]], dtype=torch.uint8)), ValueError,
         r"torch.long .*torch.uint8.*\.long\(\)"),
    Case("ids", "int16", decode(ids=torch.tensor([[3, 4, 5]], dtype=torch.int16)), ValueError, "torch.int16"),
    Case("embeds", "lade.generate", lambda model, streamer: lade.generate(
        model, inputs_embeds=torch.zeros(1, 4, 32), streamer=streamer, **GREEDY), ValueError, "pass input_ids"),
    Case("embeds", "model.generate", through_generate(input_ids=None, inputs_embeds=torch.zeros(1, 4, 32)),
         ValueError, "pass input_ids instead of inputs_embeds"),
    Case("mask", "shape", decode(attention_mask=torch.ones(1, 5, dtype=torch.long)), ValueError, "shape"),
    Case("mask", "length through model.generate", through_generate(attention_mask=torch.ones(1, 5, dtype=torch.long)),
         ValueError, "length 5"),
    Case("mask", "values", decode(*with_mask(2)[:1], attention_mask=with_mask(2)[1]), ValueError, "only 0"),
    Case("mask", "a prompt without tokens", decode(ids=B_IDS, attention_mask=B_MASK * torch.tensor([[0], [1]]),
                                                   pad_token_id=0, stream=False),
         ValueError, r"row\(s\) \[0\] are all zeros"),
    Case("mask", "one prompt, all masked", decode(*with_mask(0)[:1], attention_mask=with_mask(0)[1]), ValueError,
         "all zeros"),
    Case("mask", "right padding", decode(ids=B_IDS.flip(1), attention_mask=B_MASK.flip(1), pad_token_id=0),
         ValueError, "left-padded"),
    Case("mode", "beam sampling", decode(num_beams=2, do_sample=True), ValueError, "do_sample=False"),
    Case("mode", "group beam search", decode(num_beams=4, num_beam_groups=2, diversity_penalty=1.0), ValueError,
         "diverse.*num_beam_groups"),
    Case("mode", "constrained beam search", decode(num_beams=2, force_words_ids=[[5]]), ValueError,
         "constrained beam search.*force_words_ids"),
    Case("beams", "streamer", decode(num_beams=2), ValueError, "streamer cannot be used with beam search"),
    Case("beams", "prefix cache", beam_prefix_cache, ValueError, "does not continue a cache passed in"),
    Case("beams", "lookahead parallelism", through_generate(num_beams=2, lookahead_strategy=lambda *args: None),
         ValueError, "lookahead parallelism decodes greedily"),
    Case("beams", "corpus", decode(stream=False, num_beams=2, corpus=lade.Corpus()), ValueError,
         "not from a corpus"),
    Case("beams", "planning draft", decode(num_beams=2, stream=False, config=lade.LookaheadConfig(
        draft="retrieval", window_size=0)), ValueError, "draft='lookahead'"),
    Case("mode", "contrastive search", decode(penalty_alpha=0.6, top_k=4), ValueError, "penalty_alpha"),
    Case("mode", "DoLa", decode(dola_layers="high"), ValueError, "dola_layers"),
    Case("mode", "prompt lookup", decode(prompt_lookup_num_tokens=3), ValueError, "prompt_lookup_num_tokens"),
    Case("mode", "assistant model", decode(assistant_model=tiny_model("llama", seed=1)), ValueError,
         "assistant_model"),
    Case("mode", "assistant model through model.generate", through_generate(assistant_model=tiny_model("llama")),
         ValueError, "assistant_model"),
    Case("outputs", "num_return_sequences", decode(num_return_sequences=2, do_sample=True), ValueError,
         "num_return_sequences"),
    Case("outputs", "attentions", decode(return_dict_in_generate=True, output_attentions=True), ValueError,
         "output_attentions"),
    Case("outputs", "hidden states", decode(return_dict_in_generate=True, output_hidden_states=True), ValueError,
         "output_hidden_states"),
    Case("outputs", "synced_gpus", decode(synced_gpus=True), ValueError, "synced_gpus"),
    Case("processor", "stateful", decode(logits_processor=LogitsProcessorList([Stateful()])), ValueError,
         "Stateful.*lade_prefix_pure"),
    Case("processor", "classifier-free guidance", decode(guidance_scale=1.5), ValueError,
         "ClassifierFreeGuidance"),
    Case("positions", "bloom", decode(), ValueError, "'bloom'.*ALiBi", lambda: transformers.BloomForCausalLM(
        transformers.BloomConfig(vocab_size=96, hidden_size=32, n_layer=2, n_head=4)).eval()),
    Case("positions", "falcon alibi", decode(), ValueError, "'falcon'.*ALiBi", lambda: transformers.FalconForCausalLM(
        transformers.FalconConfig(vocab_size=96, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  alibi=True)).eval()),
    Case("positions", "decoder of an encoder-decoder family", decode(), ValueError,
         "BartForCausalLM.forward takes no position_ids.*as an encoder-decoder model", lambda: bart_decoder()),
    Case("positions", "imagegpt", decode(), ValueError, "'imagegpt'.*flattens the attention mask", lambda: imagegpt()),
    Case("recurrent", "mamba", decode(), ValueError, "'mamba' keeps a recurrent state", mamba),
    Case("recurrent", "hybrid (jamba)", decode(), ValueError, "'jamba' keeps a recurrent state", jamba),
    Case("encdec", "no adapter", decode(), ValueError, "'blenderbot-small' has no lade position adapter", blenderbot),
    Case("encdec", "two inputs", decode(ids=B_IDS, attention_mask=B_MASK), ValueError, "one input at a time",
         lambda: tiny_seq2seq("bart")),
    Case("encdec", "padded decoder prompt", decode(decoder_input_ids=torch.tensor([[1, 3]]),
                                                   decoder_attention_mask=torch.tensor([[0, 1]])),
         ValueError, "padded decoder prompt", lambda: tiny_seq2seq("bart")),
    Case("encdec", "split path",
         decode(config=lade.LookaheadConfig(window_size=4, ngram_size=3, guess_set_size=4, attention="split")),
         ValueError, "attention='mask'", lambda: tiny_seq2seq("bart")),
    Case("cache", "sliding window", decode(), ValueError, "mistral.*sliding", lambda: tiny_model(
        "mistral", sliding_window=16)),
    Case("cache", "local window (gpt_neo)", decode(), ValueError, "'gpt_neo' attends within a 4-token window",
         lambda: transformers.GPTNeoForCausalLM(transformers.GPTNeoConfig(
             vocab_size=96, hidden_size=32, num_layers=2, num_heads=4, window_size=4,
             attention_types=[[["global", "local"], 1]])).eval()),
    Case("cache", "indexed (sparse attention)", decode(), ValueError, "'deepseek_v32' keeps an indexer key cache.*"
         "plain generate", lambda: deepseek_v32()),
    Case("cache", "static", decode(cache_implementation="static"), ValueError, "DynamicCache"),
    Case("cache", "offloaded", decode(cache_implementation="offloaded"), ValueError,
         "cache_implementation='offloaded' is not supported: an offloaded cache"),
    Case("cache", "paged", decode(cache_implementation="paged"), ValueError, "continuous batching"),
    Case("cache", "prefix cache with padding", padded_prefix_cache, ValueError, "one unpadded prompt"),
    Case("cache", "prefix cache holding the prompt", prefix_cache(24), ValueError, "holds 24 tokens"),
    Case("quant", "untested method", decode(), ValueError, "'hqq' is not supported", lambda: quantized("hqq")),
    Case("quant", "missing backend", missing_backend, ImportError, r"pip install 'lade-decoding\[bnb\]'",
         lambda: quantized("bitsandbytes")),
    Case("meta", "meta device", decode(), ValueError, "meta device", meta_model),
    Case("loop", "own decoding loop", decode(), ValueError, "replaces transformers' decoding loop", own_loop_model),
    Case("attention", "mask on flex_attention", decode(config=lade.LookaheadConfig(attention="mask")), ValueError,
         "flex_attention", flex_configured),
    Case("attention", "split outside the interface", decode(config=lade.LookaheadConfig(attention="split")),
         ValueError, "AttentionInterface", lambda: Legacy(tiny_model("llama").config).eval()),
    Case("batch", "streamer", decode(ids=B_IDS, attention_mask=B_MASK, pad_token_id=0), ValueError,
         "a streamer takes one sequence"),
    Case("batch", "prefix_allowed_tokens_fn", decode(ids=B_IDS, attention_mask=B_MASK, pad_token_id=0, stream=False,
                                                     prefix_allowed_tokens_fn=lambda batch_id, ids: [3, 4]),
         ValueError, "batch index"),
    Case("batch", "custom criterion without eos", decode(ids=B_IDS, attention_mask=B_MASK, pad_token_id=0,
                                                         stopping_criteria=StoppingCriteriaList([StopAfter()]),
                                                         stream=False), ValueError, "needs an eos_token_id"),
    Case("stream", "stop strings without tokenizer", decode(stop_strings=["x"]), ValueError, "tokenizer"),
    Case("stream", "token healing without tokenizer", decode(token_healing=True), ValueError,
         "token_healing needs the model's tokenizer"),
    Case("stream", "token healing of a batch", decode(ids=B_IDS, attention_mask=B_MASK, pad_token_id=0, stream=False,
                                                      token_healing=True, tokenizer=char_tokenizer()),
         ValueError, "one unpadded prompt"),
    Case("corpus", "the lookahead drafter", decode(corpus=lade.Corpus()), ValueError, "cannot draft from a corpus"),
    Case("corpus", "plain decoding", decode(config=lade.LookaheadConfig(enabled=False), corpus=lade.Corpus()),
         ValueError, "plain decoding"),
    Case("corpus", "not a Corpus", decode(config=RETRIEVAL, corpus={}), ValueError, "must be a lade.Corpus"),
    Case("corpus", "another vocabulary", decode(config=RETRIEVAL, corpus=corpus_of(vocab_size=64)), ValueError,
         "use a corpus per vocabulary"),
    Case("corpus", "draft='corpus' without one", decode(config=lade.LookaheadConfig(draft="corpus")), ValueError,
         "pass corpus=lade.Corpus"),
]
NO_STREAMER = {"batch: streamer", "beams: streamer"}  # the streamer is the subject: counted, but passed on purpose


class _Counter:
    def __init__(self) -> None:
        self.forwards = 0

    def reset(self, model) -> None:
        self.forwards = 0

    def hook(self, *_):
        self.forwards += 1


counter = _Counter()


@pytest.mark.parametrize("case", CASES, ids=[f"{c.rule}: {c.name}" for c in CASES])
def test_refused_before_any_work(case: Case):
    """The error type and words, and no forward of the model and no streamer call before the refusal (the batch
    streamer case passes one on purpose, and it too gets no call)."""
    model = case.model()
    counter.reset(model)
    handle = model.register_forward_pre_hook(counter.hook)
    streamer = RecordingStreamer()
    try:
        with pytest.raises(case.error, match=case.words):
            case.call(model, streamer)
    finally:
        handle.remove()
    assert counter.forwards == 0, "the model ran before the refusal"
    assert streamer.calls == 0, "the streamer was called before the refusal"


def test_both_streamers_refused():
    model = tiny_model("llama")
    with pytest.raises(ValueError, match="pass one streamer"):
        model.generate(one(), attention_mask=torch.ones_like(one()), custom_generate=lade.lookahead_generate,
                       lookahead_config=CFG, streamer=RecordingStreamer(), lookahead_streamer=RecordingStreamer(),
                       **GREEDY)


def test_every_rule_has_a_case_and_the_readme_lists_exactly_these_rules():
    assert {c.rule for c in CASES} | {"stream"} == set(RULES)
    text = README.read_text()
    block = re.search(r"<!-- refusals: tests/core/test_refusals.py -->\n(.*?)<!-- /refusals -->", text, re.S)
    assert block, "README.md lacks the refusals list between its markers"
    listed = [line[2:].strip() for line in block.group(1).splitlines() if line.startswith("- ")]
    assert sorted(listed) == sorted(RULES.values())


def test_a_processor_marked_prefix_pure_is_accepted():
    """The escape hatch the processor refusal names: a custom processor marked lade_prefix_pure decodes exactly."""
    model = tiny_model("llama")
    pure = Stateful()
    pure.lade_prefix_pure = True
    ids = one()
    out = lade.generate(model, ids, CFG, logits_processor=LogitsProcessorList([pure]), **GREEDY)
    assert torch.equal(out, model.generate(ids, attention_mask=torch.ones_like(ids), **GREEDY))
