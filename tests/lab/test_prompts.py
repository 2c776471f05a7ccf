"""Prompt formats: how a prompt of a set becomes model input (chat template, raw, the reference's formats)."""

import pytest
import torch

from lab.harness.prompts import REFERENCE_SUMMARY, SUMMARY_PREFIX, VICUNA, encode_prompt, encode_prompts, load_prompts
from tiny_hub import tiny_tokenizer


@pytest.fixture(scope="module")
def chat_tok():
    return tiny_tokenizer()


@pytest.fixture(scope="module")
def base_tok():
    tok = tiny_tokenizer()
    tok.chat_template = None
    return tok


def test_chat_wraps_one_user_turn_and_equals_the_template_tokens(chat_tok):
    """The text fed is the rendered template; its tokens are what apply_chat_template gives (no second BOS)."""
    encoded = encode_prompt(chat_tok, "hello world", "mt_bench", "chat")
    assert encoded.format == "chat" and encoded.text == "<s>user: hello world</s><s>assistant:"
    direct = chat_tok.apply_chat_template([{"role": "user", "content": "hello world"}], add_generation_prompt=True,
                                          return_tensors="pt", return_dict=True)["input_ids"]
    assert torch.equal(encoded.input_ids, direct)
    assert encoded.attention_mask.shape == encoded.input_ids.shape and bool(encoded.attention_mask.all())


def test_auto_is_chat_with_a_template_and_raw_without(chat_tok, base_tok):
    prompt = load_prompts("humaneval", n=1)[0]["prompt"]
    assert encode_prompt(chat_tok, prompt, "humaneval", "auto").format == "chat"
    raw = encode_prompt(base_tok, prompt, "humaneval", "auto")
    assert raw.format == "raw" and raw.text == prompt  # the completion prompt, unchanged
    assert torch.equal(raw.input_ids, base_tok(prompt, return_tensors="pt")["input_ids"])


def test_chat_without_a_template_says_what_to_change(base_tok):
    with pytest.raises(ValueError, match="no chat template.*'raw'"):
        encode_prompt(base_tok, "hi", "mt_bench", "chat")


def test_reference_formats_follow_the_reference_evaluation_scripts(chat_tok):
    """HumanEval raw (eval_humaneval.py), summarization in its Llama-2 [INST] prompt with the article (eval_cnndm.py),
    MT-Bench through the chat template (eval_mtbench.py's conversation template)."""
    code = load_prompts("humaneval", n=1)[0]["prompt"]
    assert encode_prompt(chat_tok, code, "humaneval", "reference").text == code
    article = load_prompts("spec_bench:summarization", n=1)[0]["prompt"]
    assert article.startswith(SUMMARY_PREFIX)
    summary = encode_prompt(chat_tok, article, "spec_bench:summarization", "reference")
    assert summary.format == "raw" and summary.text.startswith("[INST] <<SYS>>\nYou are an intelligent chatbot.")
    assert summary.text == REFERENCE_SUMMARY.format(document=article.removeprefix(SUMMARY_PREFIX))
    assert summary.text.endswith("Briefly summarize the given context. [/INST]\nSummary: ")
    assert encode_prompt(chat_tok, "hi", "mt_bench", "reference").format == "chat"


def test_vicuna_is_spec_benchs_conversation_prompt(base_tok):
    encoded = encode_prompt(base_tok, "Who wrote Hamlet?", "spec_bench:qa", "vicuna")
    assert encoded.text == VICUNA.format(prompt="Who wrote Hamlet?")
    assert encoded.text.endswith("USER: Who wrote Hamlet? ASSISTANT:")


def test_unknown_format_is_refused(chat_tok):
    with pytest.raises(ValueError, match="prompt_format 'markdown'"):
        encode_prompt(chat_tok, "hi", "mt_bench", "markdown")


def test_encode_prompts_is_the_benchmarks_one_encoder(chat_tok):
    """lab.harness.bench and lab.harness.batched feed prompts encoded by encode_prompts: a row's `encode_as` picks
    the set whose format applies (a Spec-Bench task in a mixed list), the first `all_methods` rows are marked, and
    the ids on the device equal the encoding's."""
    rows = [{"id": 3, "prompt": "Summarize: a story.", "encode_as": "spec_bench:summarization"},
            {"id": "q7", "prompt": "Who wrote Hamlet?"}]
    first, second = encode_prompts(chat_tok, "spec_bench", rows, "reference", all_methods=1)
    assert (first.set_name, first.prompt_id, first.all_methods) == ("spec_bench", "3", True)
    assert first.encoded.text == encode_prompt(chat_tok, rows[0]["prompt"], "spec_bench:summarization",
                                               "reference").text
    assert (second.prompt_id, second.all_methods, second.encoded.format) == ("q7", False, "chat")
    assert torch.equal(second.ids[0], second.encoded.input_ids) and torch.equal(second.tokens, second.ids[0][0])
    assert all(p.all_methods for p in encode_prompts(chat_tok, "mt_bench", rows[1:]))
