"""Tiny randomly initialised encoder-decoder models of seven families, built from configs in code."""

from __future__ import annotations

import torch
import transformers

from tiny_models import VOCAB

SPECIAL = dict(vocab_size=VOCAB, pad_token_id=0, bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
BART_LIKE = dict(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
                 encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=512, init_std=0.2,
                 scale_embedding=True, tie_word_embeddings=False, forced_bos_token_id=None, forced_eos_token_id=None)
T5_LIKE = dict(d_model=32, d_kv=8, d_ff=64, num_layers=2, num_decoder_layers=2, num_heads=4,
               relative_attention_num_buckets=16, relative_attention_max_distance=64, initializer_factor=2.0,
               tie_word_embeddings=False)
RELATIVE_BIAS_STD = 3.0  # strong position bias, so that misplaced tokens change the output

FAMILIES = {
    "bart": ("BartConfig", "BartForConditionalGeneration", BART_LIKE),
    "mbart": ("MBartConfig", "MBartForConditionalGeneration", BART_LIKE),
    "marian": ("MarianConfig", "MarianMTModel", BART_LIKE),
    "pegasus": ("PegasusConfig", "PegasusForConditionalGeneration", BART_LIKE),
    "t5": ("T5Config", "T5ForConditionalGeneration", T5_LIKE),
    "mt5": ("MT5Config", "MT5ForConditionalGeneration", T5_LIKE),
    "umt5": ("UMT5Config", "UMT5ForConditionalGeneration", T5_LIKE),
}


def tiny_seq2seq(family: str = "bart", attn: str = "sdpa", seed: int = 0, **overrides):
    config_name, model_name, extra = FAMILIES[family]
    config = getattr(transformers, config_name)(**{**SPECIAL, **extra, **overrides})
    torch.manual_seed(seed)
    model = getattr(transformers, model_name)(config)
    for module in model.modules():
        if getattr(module, "has_relative_attention_bias", False):
            torch.nn.init.normal_(module.relative_attention_bias.weight, std=RELATIVE_BIAS_STD)
    model.set_attn_implementation(attn)
    return model.eval()
