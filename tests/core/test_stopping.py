"""Generation semantics of plain `generate` kept under multi-token steps: EOS and max length in the middle
of an accepted chunk, stop strings, custom stopping criteria, streaming."""

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

import lade
from tiny_models import VOCAB, RecordingStreamer, char_tokenizer, random_prompt, tiny_model

CFG = lade.LookaheadConfig(window_size=4, ngram_size=4, guess_set_size=6)
GREEDY = dict(do_sample=False, max_new_tokens=48, eos_token_id=None)


def plain(model, ids, **kw):
    return model.generate(ids, attention_mask=torch.ones_like(ids), **{**GREEDY, **kw})


def chunks_of(model, ids):
    """The new tokens of an unstopped lade run, split into the chunks each forward step emitted."""
    out, stats = lade.generate(model, ids, CFG, return_stats=True, **GREEDY)
    new, chunks, i = out[0, ids.shape[1]:].tolist(), [], 0
    for n in stats.accepted_per_step:
        chunks.append(new[i : i + n])
        i += n
    return chunks


def mid_chunk_cases(model, n_prompts: int, per_prompt: int = 2):
    """(prompt, chunk start, index within chunk, chunk) for tokens emitted second or later within a step,
    at most `per_prompt` cases from each prompt."""
    for seed in range(n_prompts):
        ids = random_prompt(300 + seed)
        start, found = 0, 0
        for chunk in chunks_of(model, ids):
            for k in range(1, len(chunk)):
                if found < per_prompt:
                    found += 1
                    yield ids, start, k, chunk
            start += len(chunk)


def test_max_new_tokens_is_exact_mid_chunk():
    model = tiny_model("llama", "sdpa")
    cases = 0
    for ids, start, k, _ in mid_chunk_cases(model, 4):
        n = start + k  # the step that could emit token n+1 must stop after n
        out = lade.generate(model, ids, CFG, **{**GREEDY, "max_new_tokens": n})
        assert out.shape[1] == ids.shape[1] + n
        assert torch.equal(out, plain(model, ids, max_new_tokens=n))
        cases += 1
    assert cases >= 5, "no multi-token step to cut: the test would not exercise mid-chunk stopping"


def test_every_eos_id_honoured_mid_chunk():
    """An EOS id met inside an accepted chunk cuts the output exactly there; each id of a list counts."""
    model = tiny_model("qwen2", "eager")
    cases = 0
    for ids, _start, k, chunk in mid_chunk_cases(model, 8, per_prompt=1):
        eos = chunk[k]
        if eos in ids[0].tolist() or eos in chunk[:k]:
            continue
        for eos_ids in ([eos], [VOCAB - 1, eos]):
            out = lade.generate(model, ids, CFG, **{**GREEDY, "eos_token_id": eos_ids, "pad_token_id": 0})
            ref = plain(model, ids, eos_token_id=eos_ids, pad_token_id=0)
            assert torch.equal(out, ref)
        cases += 1
    assert cases >= 3


class _SumAbove(StoppingCriteria):
    def __init__(self, prompt_len: int, limit: int) -> None:
        self.prompt_len, self.limit = prompt_len, limit

    def __call__(self, input_ids, scores, **kwargs):
        return input_ids[:, self.prompt_len:].sum(-1) > self.limit


def test_custom_stopping_criteria():
    model = tiny_model("gpt2", "sdpa")
    for seed in range(6):
        ids = random_prompt(400 + seed)
        crit = lambda ids=ids: StoppingCriteriaList([_SumAbove(ids.shape[1], 700)])
        out = lade.generate(model, ids, CFG, stopping_criteria=crit(), **GREEDY)
        assert torch.equal(out, plain(model, ids, stopping_criteria=crit()))


def test_stop_strings_spanning_a_chunk():
    model = tiny_model("llama", "eager")
    tokenizer = char_tokenizer()
    cases = 0
    for ids, _start, k, chunk in mid_chunk_cases(model, 4):
        stop = tokenizer.decode(chunk[k - 1 : k + 1])  # two tokens straddling inside one step
        kw = dict(stop_strings=[stop], tokenizer=tokenizer)
        out = lade.generate(model, ids, CFG, **GREEDY, **kw)
        ref = plain(model, ids, **kw)
        assert torch.equal(out, ref)
        cases += 1
    assert cases >= 3


def test_streamer_gets_every_token_once_in_order():
    model = tiny_model("llama", "sdpa")
    ids = random_prompt(500)
    streamer = RecordingStreamer()
    out, stats = lade.generate(model, ids, CFG, streamer=streamer, return_stats=True, **GREEDY)
    assert streamer.puts[0] == ids[0].tolist()  # the prompt first, as plain generate does
    assert sum(streamer.puts[1:], []) == out[0, ids.shape[1]:].tolist()
    assert streamer.ended and max(stats.accepted_per_step) > 1
