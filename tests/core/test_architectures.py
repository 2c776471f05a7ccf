"""Families whose attention, positions or configs need care, each decoded exactly (equal to plain generate) or
refused before any forward naming why: attention windows (GPT-Neo's local layers, Mistral's sliding window), models
that cannot place a step's tokens (ImageGPT, Kosmos-2.5, OpenAI-GPT, XLM, BLT), and "auto" on composite models, whose
text sizes live in their text config (Llava, PaliGemma) or whose position table is short (Bark)."""

from __future__ import annotations

import pytest
import torch
import transformers

import lade

GREEDY = dict(do_sample=False, eos_token_id=None, pad_token_id=0)
CONFIGS = [lade.LookaheadConfig(window_size=5, ngram_size=4, guess_set_size=5),
           lade.LookaheadConfig(window_size=3, ngram_size=3, guess_set_size=3)]
SMALL = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)


def prompt(vocab: int = 90, length: int = 18) -> torch.Tensor:
    """[1, length] ids in [3, vocab) whose first third repeats at the end (n-grams for the prompt pool)."""
    ids = torch.randint(3, vocab, (1, length), generator=torch.Generator().manual_seed(0))
    ids[0, -length // 3:] = ids[0, : length // 3]
    return ids


def built(cls, config):
    torch.manual_seed(0)
    return cls(config).eval()


def gpt_neo(window: int):
    return built(transformers.GPTNeoForCausalLM, transformers.GPTNeoConfig(
        vocab_size=99, hidden_size=32, num_layers=2, num_heads=4, attention_types=[[["global", "local"], 1]],
        window_size=window, max_position_embeddings=512, bos_token_id=1, eos_token_id=2))


def mistral(window: int):
    return built(transformers.MistralForCausalLM, transformers.MistralConfig(vocab_size=99, sliding_window=window,
                                                                             **SMALL))


def llava():
    text = transformers.LlamaConfig(vocab_size=99, **SMALL)
    vision = transformers.CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                           num_attention_heads=4, image_size=30, patch_size=6)
    return built(transformers.LlavaForConditionalGeneration,
                 transformers.LlavaConfig(text_config=text, vision_config=vision, image_token_index=98))


def paligemma():
    text = transformers.GemmaConfig(vocab_size=99, head_dim=8, **SMALL)
    vision = transformers.SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                             num_attention_heads=4, image_size=30, patch_size=6)
    return built(transformers.PaliGemmaForConditionalGeneration,
                 transformers.PaliGemmaConfig(text_config=text, vision_config=vision, image_token_index=98))


def bark():
    return built(transformers.BarkCausalModel, transformers.BarkSemanticConfig(
        block_size=64, input_vocab_size=99, output_vocab_size=99, num_layers=2, num_heads=4, hidden_size=32))


def imagegpt():
    return built(transformers.ImageGPTForCausalImageModeling, transformers.ImageGPTConfig(
        vocab_size=99, n_embd=32, n_layer=2, n_head=4, n_positions=512))


def kosmos_2_5():
    text = dict(vocab_size=99, embed_dim=32, layers=2, ffn_dim=64, attention_heads=4, max_position_embeddings=512)
    vision = dict(hidden_size=32, patch_embed_hidden_size=32, intermediate_size=64, head_dim=8, num_hidden_layers=2,
                  num_attention_heads=4)
    return built(transformers.Kosmos2_5ForConditionalGeneration,
                 transformers.Kosmos2_5Config(text_config=text, vision_config=vision, latent_query_num=4))


def reformer():
    return built(transformers.ReformerModelWithLMHead, transformers.ReformerConfig(
        vocab_size=99, hidden_size=32, attention_head_size=8, num_attention_heads=4, feed_forward_size=64,
        attn_layers=["local", "lsh"], axial_pos_embds=False, is_decoder=True, max_position_embeddings=512))


def openai_gpt():
    return built(transformers.OpenAIGPTLMHeadModel, transformers.OpenAIGPTConfig(
        vocab_size=99, n_embd=32, n_layer=2, n_head=4, n_positions=512))


def xlm():
    return built(transformers.XLMWithLMHeadModel, transformers.XLMConfig(
        vocab_size=99, emb_dim=32, n_layers=2, n_heads=4, causal=True))


def blt():
    small = dict(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
                 intermediate_size=64)
    return built(transformers.BltForCausalLM, transformers.BltConfig(
        vocab_size=260, encoder_hash_byte_group_vocab=50, patcher_config=dict(small, vocab_size=260),
        encoder_config=dict(small, hidden_size_global=32, vocab_size=260),
        decoder_config=dict(small, hidden_size_global=32, vocab_size=260), global_config=small))


def forwards(model) -> list[int]:
    """A counter of the model's forwards, hooked on the model."""
    count = [0]
    model.register_forward_pre_hook(lambda *_: count.__setitem__(0, count[0] + 1))
    return count


def assert_exact(model, config, new: int = 20, beams: int = 1, ids: torch.Tensor | None = None) -> None:
    ids = prompt() if ids is None else ids
    kwargs = dict(GREEDY, max_new_tokens=new, num_beams=beams)
    expected = model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs)
    assert torch.equal(lade.generate(model, ids, lookahead_config=config, **kwargs), expected)


@pytest.mark.parametrize("beams", [1, 3])
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.label)
def test_gpt_neo_below_its_local_window_is_exact(config, beams):
    """GPT-Neo's local layers hide keys window_size indices behind a query; below the window nothing is hidden."""
    assert_exact(gpt_neo(window=128), config, beams=beams)


@pytest.mark.parametrize("model", [lambda: gpt_neo(window=7), lambda: mistral(window=24)], ids=["gpt_neo", "mistral"])
def test_a_call_reaching_an_attention_window_is_refused_before_any_forward(model):
    """Past the window, a step's tokens (later in the cache than their positions) would lose keys plain decoding
    shows them: refused, with the window and what to lower, before any forward."""
    model = model()
    count = forwards(model)
    with pytest.raises(ValueError, match=r"-token window .*reaches it.*lower max_new_tokens"):
        lade.generate(model, prompt(), lookahead_config=CONFIGS[0], max_new_tokens=20, **GREEDY)
    assert count[0] == 0


def test_the_window_check_counts_the_steps_width():
    """A call whose prompt and new tokens fit the window but whose lookahead steps do not is refused too, saying how
    many new tokens would fit."""
    with pytest.raises(ValueError, match=r"a step of up to 31 tokens.*at most 11"):
        lade.generate(mistral(window=60), prompt(), lookahead_config=CONFIGS[0], max_new_tokens=20, **GREEDY)


@pytest.mark.parametrize("beams", [1, 3])
def test_mistral_below_its_sliding_window_is_exact(beams):
    """A sliding window the sequence never reaches (Mistral's 4096 here) changes nothing: lade decodes it."""
    assert_exact(mistral(window=4096), CONFIGS[0], beams=beams)
    assert_exact(mistral(window=4096), "auto", beams=beams)


@pytest.mark.parametrize("model, words", [(imagegpt, "'imagegpt'.*flattens the attention mask"),
                                          (kosmos_2_5, "'kosmos-2.5'.*drops position_ids"),
                                          (openai_gpt, "'openai-gpt'.*only a 2-D padding mask"),
                                          (xlm, "'xlm'.*own causal mask"),
                                          (reformer, "'reformer'.*LSH and local attention")])
def test_models_that_cannot_place_a_steps_tokens_are_refused(model, words):
    model = model()
    count = forwards(model)
    with pytest.raises(ValueError, match=words + ".*plain generate"):
        lade.generate(model, prompt(), lookahead_config=CONFIGS[0], max_new_tokens=8, **GREEDY)
    assert count[0] == 0


@pytest.mark.parametrize("model", [llava, paligemma, bark, lambda: mistral(window=128)],
                         ids=["llava", "paligemma", "bark", "sliding window"])
def test_auto_profiles_a_composite_or_short_model_through_its_text_config(model, tmp_path, monkeypatch):
    """"auto" measures the model with random ids of its text vocabulary, within its position table (Bark's
    block_size of 64 here) and attention window (128 here, under the measurement's usual context), and decodes
    exactly."""
    monkeypatch.setenv("LADE_CACHE", str(tmp_path))
    assert_exact(model(), "auto")


def fsmt():
    return built(transformers.FSMTForConditionalGeneration, transformers.FSMTConfig(
        src_vocab_size=99, tgt_vocab_size=99, d_model=32, encoder_layers=2, decoder_layers=2, encoder_ffn_dim=64,
        decoder_ffn_dim=64, encoder_attention_heads=4, decoder_attention_heads=4, num_beams=1))


def dia():
    small = dict(num_hidden_layers=2, hidden_size=32, intermediate_size=64, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=8)
    decoder = dict(small, cross_num_attention_heads=4, cross_head_dim=8, cross_num_key_value_heads=4,
                   cross_hidden_size=32, vocab_size=40, num_channels=2, pad_token_id=37, eos_token_id=36,
                   bos_token_id=38)
    return built(transformers.DiaForConditionalGeneration,
                 transformers.DiaConfig(encoder_config=dict(small, vocab_size=99), decoder_config=decoder,
                                         delay_pattern=[0, 1]))


def test_heads_and_embeddings_that_are_not_plain_tables_are_sized_from_the_text_config():
    """FSMT's head is an embedding module, Dia names no input embedding: the vocabulary sizes still resolve, and an
    FSMT call is refused for its missing position adapter (not a crash in the head's look-up)."""
    from lade.vocabulary import input_vocab, logits_width

    assert (input_vocab(fsmt()), logits_width(fsmt())) == (99, 99)
    assert input_vocab(dia()) == dia().config.get_text_config(decoder=True).vocab_size
    with pytest.raises(ValueError, match="'fsmt' has no lade position adapter"):
        lade.generate(fsmt(), prompt(), lookahead_config=CONFIGS[0], max_new_tokens=8, **GREEDY)


def test_blt_is_refused_for_its_in_forward_patching():
    """BLT patches each forward's own bytes, so a step's drafts would be patched unlike plain decoding's tokens
    (transformers 5.24's generate cannot build BLT's cache at all, so the model check is called directly)."""
    from lade.checks import check_model

    with pytest.raises(ValueError, match="'blt'.*patches inside each forward.*plain generate"):
        check_model(blt())


@pytest.mark.parametrize("beams", [1, 3])
@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.label)
def test_steps_fit_a_fixed_causal_buffer(config, beams):
    """Bark masks with a causal buffer of block_size keys (Positions.keys): each step's drafts are cut so the cache
    plus the step stays within it (an 18-token prompt and 40 new tokens in a 64-key buffer), in greedy decoding and
    beam search alike, and the output equals plain generate."""
    from lade.rope import Positions

    model = bark()
    assert Positions.of(model).keys == 64
    assert_exact(model, config, new=40, beams=beams)


def test_a_model_with_its_own_decoding_loop_is_refused_before_any_forward():
    """CSM and Higgs Audio replace `_sample` (audio codes per step), DiffusionGemma is no GenerationMixin: their
    generate is not the token-by-token loop lookahead steps reproduce."""

    class OwnLoop(transformers.LlamaForCausalLM):
        def _sample(self, *args, **kwargs):
            return super()._sample(*args, **kwargs)

    class Diffusion(transformers.LlamaPreTrainedModel):  # not a GenerationMixin (DiffusionGemma decodes blocks)
        def __init__(self, config):
            super().__init__(config)
            self.model = transformers.LlamaModel(config)

        def forward(self, input_ids=None, position_ids=None, **kwargs):
            return self.model(input_ids, position_ids=position_ids, **kwargs)

    for cls, words in ((OwnLoop, "replaces transformers' decoding loop.*plain generate"),
                       (Diffusion, "not transformers' token-by-token decoding.*its own generate")):
        model = built(cls, transformers.LlamaConfig(vocab_size=99, **SMALL))
        count = forwards(model)
        with pytest.raises(ValueError, match=words):
            lade.generate(model, prompt(), lookahead_config=CONFIGS[0], max_new_tokens=8, **GREEDY)
        assert count[0] == 0


def test_a_model_whose_own_generate_ignores_custom_generate_is_refused_before_any_forward():
    """MusicGen's generate runs its own loop over a delay pattern of codebooks and never calls custom_generate:
    refused by lade, naming why, instead of transformers' "model_kwargs are not used" error."""
    config = transformers.MusicgenDecoderConfig(vocab_size=99, hidden_size=32, num_hidden_layers=2,
                                                num_attention_heads=4, ffn_dim=64, num_codebooks=1)
    model = built(transformers.MusicgenForCausalLM, config)
    count = forwards(model)
    with pytest.raises(ValueError, match="delay pattern.*its own generate"):
        lade.generate(model, prompt(), lookahead_config=CONFIGS[0], max_new_tokens=8, **GREEDY)
    assert count[0] == 0


def test_auto_profiles_a_model_whose_input_vocabulary_exceeds_its_logits(tmp_path, monkeypatch):
    """Mllama, Molmo2 and Moshi embed more ids than their head scores (image or audio ids): the profile's drafting
    measurement drafts over the logits' ids only, so "auto" measures and decodes exactly."""
    monkeypatch.setenv("LADE_CACHE", str(tmp_path))
    model = built(transformers.LlamaForCausalLM, transformers.LlamaConfig(vocab_size=99, **SMALL))
    torch.manual_seed(1)
    model.model.embed_tokens = torch.nn.Embedding(130, SMALL["hidden_size"])  # ids 99..129 embedded, never scored
    assert_exact(model, "auto")


def test_auto_fits_its_steps_below_an_attention_window(tmp_path, monkeypatch):
    """"auto" sizes its steps to stay below the window the call would otherwise reach (a 38-token call, a 48-token
    window: steps of at most 10 tokens), where a fixed config as wide is refused, and decodes exactly."""
    from lade.auto import fitted

    monkeypatch.setenv("LADE_CACHE", str(tmp_path))
    assert_exact(mistral(window=48), "auto")
    wide = lade.LookaheadConfig(draft="merged", adaptive=True, step_budget=24, window_size=4, ngram_size=3)
    assert fitted(wide, 10).max_step_tokens() <= 10 and fitted(wide, 10).window_size == 0
    assert not fitted(wide, 1).enabled and fitted(wide, None) is wide
    with pytest.raises(ValueError, match="attends within a 48-token window"):
        lade.generate(mistral(window=48), prompt(), lookahead_config=CONFIGS[0], max_new_tokens=20, **GREEDY)
