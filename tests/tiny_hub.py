"""A tiny random chat model saved as a local folder (tokenizer with a chat template + Llama weights)."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from tiny_models import tiny_model

CHAT_TEMPLATE = (
    "{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<s>assistant:{% endif %}"
)


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """Byte-level BPE with ~300 tokens (trained in memory on two lines) and a minimal chat template."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<pad>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(["def f(x): return x + 1", "hello world, how are you?"], trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def save_tiny_chat_model(folder: Path) -> Path:
    """Write tokenizer + tiny Llama (vocab matched, long enough positions for any frozen prompt) to `folder`."""
    tok = tiny_tokenizer()
    model = tiny_model("llama", "sdpa", vocab_size=len(tok), max_position_embeddings=8192,
                       pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder
