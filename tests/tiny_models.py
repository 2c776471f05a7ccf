"""Tiny randomly initialised causal LMs of several architectures, built from configs in code."""

from __future__ import annotations

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers

VOCAB = 96
COMMON = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
              num_attention_heads=4, max_position_embeddings=1024, bos_token_id=1, eos_token_id=2, pad_token_id=0)

ARCHITECTURES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", dict(num_key_value_heads=2)),
    "mistral": ("MistralConfig", "MistralForCausalLM", dict(num_key_value_heads=2, sliding_window=None)),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(num_key_value_heads=2)),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM", dict(num_key_value_heads=2, head_dim=8)),
    "phi3": ("Phi3Config", "Phi3ForCausalLM", dict(num_key_value_heads=2)),
    "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM", dict(rotary_pct=0.5)),
    "stablelm": ("StableLmConfig", "StableLmForCausalLM", dict(num_key_value_heads=2)),
    "olmo2": ("Olmo2Config", "Olmo2ForCausalLM", dict(num_key_value_heads=2)),
    "granite": ("GraniteConfig", "GraniteForCausalLM", dict(num_key_value_heads=2)),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", dict(n_embd=32, n_layer=2, n_head=4, n_positions=1024)),
}


def tiny_model(arch: str = "llama", attn: str = "sdpa", seed: int = 0, **overrides):
    config_name, model_name, extra = ARCHITECTURES[arch]
    config = getattr(transformers, config_name)(**{**COMMON, **extra, **overrides})
    torch.manual_seed(seed)
    model = getattr(transformers, model_name)(config)
    model.set_attn_implementation(attn)
    return model.eval()


def drafts_often_accepted(vocab: int):
    """A tiny Llama over `vocab` tokens with sharpened logits, and a prompt [1, 48] it sampled itself, so that the
    prompt's n-grams (the drafts) are likely continuations and several drafts are often accepted in one step."""
    model = tiny_model("llama", "sdpa", vocab_size=vocab)
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    torch.manual_seed(0)
    start = torch.tensor([[3, 4, 5]])
    ids = model.generate(start, attention_mask=torch.ones_like(start), do_sample=True, max_new_tokens=45,
                         eos_token_id=None, top_k=0)
    return model, ids


def random_prompt(seed: int, length: int = 24, repeat: bool = True) -> torch.Tensor:
    """[1, length] token ids in [3, VOCAB); with `repeat`, a span occurs twice (n-grams for the prompt pool)."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, (length,), generator=g)
    if repeat and length >= 12:
        span = length // 4
        ids[-span:] = ids[:span]
    return ids.unsqueeze(0)


def forward_all_rows(call, layout, past: int) -> torch.Tensor:
    """Logits of every row [q, V] of one step `layout` after `past` cached tokens, through `call` (a lade ModelCall)."""
    from lade.layout import stack_layouts

    batch = stack_layouts([layout])
    mask = call.attention.step_mask(batch, past, None, call.model.dtype)
    return call._logits(batch.input_ids, batch.position_ids(torch.tensor([past])), mask, None)[0]


def char_tokenizer() -> transformers.PreTrainedTokenizerFast:
    """A word-level tokenizer over VOCAB single characters, so that stop strings can span tokens."""
    chars = [chr(c) for c in range(ord("!"), ord("!") + VOCAB)]
    tok = Tokenizer(models.WordLevel({c: i for i, c in enumerate(chars)}, unk_token=chars[0]))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tok.decoder = decoders.Fuse()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token=chars[0])


class RecordingStreamer:
    """A streamer that records what it is given: puts (token lists) and whether end() came; calls counts both."""

    def __init__(self) -> None:
        self.puts: list[list[int]] = []
        self.ended = False

    @property
    def calls(self) -> int:
        return len(self.puts) + int(self.ended)

    def put(self, value) -> None:
        self.puts.append(value.reshape(-1).tolist())

    def end(self) -> None:
        self.ended = True


ROPE_TYPES = ("linear", "dynamic", "yarn", "longrope", "llama3", "proportional")  # transformers' scaled RoPE types
ROTARY_DIM = {"gpt_neox": 4, "stablelm": 2}  # rotary dims of the partial-rotary architectures above (else head_dim 8)


def rope_types(arch: str) -> tuple[str, ...]:
    """The scaled RoPE types a tiny `arch` model takes (phi3: longrope only; stablelm's 2 rotary dims: no dynamic NTK
    or proportional; gpt2: no RoPE)."""
    if arch == "gpt2":
        return ()
    if arch == "phi3":
        return ("longrope",)
    return tuple(t for t in ROPE_TYPES if not (arch == "stablelm" and t in ("dynamic", "proportional")))


def scaled_rope(arch: str, rope_type: str, original: int = 48) -> dict:
    """tiny_model overrides for `rope_type` whose original length is `original` positions: dynamic NTK scales past
    max_position_embeddings = original, longrope switches to its long factors past it (Phi-3 also re-encodes there).
    Weights 10x the default scale, so that a change of frequencies moves the argmax, not only the logits."""
    dim = ROTARY_DIM.get(arch, 8)
    params = dict(rope_type=rope_type, rope_theta=10000.0)
    if dim < 8:
        params["partial_rotary_factor"] = dim / 8
    params.update({
        "linear": dict(factor=2.0),
        "dynamic": dict(factor=8.0),
        "yarn": dict(factor=4.0, original_max_position_embeddings=original),
        "longrope": dict(short_factor=[1.0 + 0.1 * i for i in range(dim // 2)],
                         long_factor=[4.0**i for i in range(dim // 2)], original_max_position_embeddings=original),
        "llama3": dict(factor=4.0, low_freq_factor=1.0, high_freq_factor=4.0,
                       original_max_position_embeddings=original),
        "proportional": dict(partial_rotary_factor=0.5),
    }[rope_type])
    extra = dict(original_max_position_embeddings=original) if arch == "phi3" else {}
    table = original if rope_type == "dynamic" else 4 * original
    return dict(rope_parameters=params, initializer_range=0.2, max_position_embeddings=table, **extra)
