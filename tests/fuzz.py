"""A differential fuzzer: random cases (model, attention path, RoPE type, lookahead config, prompts, generation
arguments, batches, caches, encoder-decoder models) decoded by lade and by plain `model.generate`; the outputs must be
equal.

Every case is a pure function of its seed: `case(seed)` draws it, `run(case)` decodes it both ways and returns a
failure description or None. `python tests/fuzz.py SEED` reruns one case and prints it.
"""

from __future__ import annotations

import copy
import random
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import torch
from transformers.cache_utils import DynamicCache
from transformers.generation.stopping_criteria import StoppingCriteria, StoppingCriteriaList

import lade
from lade.rope import POSITION_DEPENDENT
from tiny_models import VOCAB, char_tokenizer, random_prompt, rope_types, scaled_rope, tiny_model
from tiny_seq2seq import tiny_seq2seq

ARCHS = ("llama", "gpt2", "qwen2", "qwen3", "gpt_neox", "phi3", "olmo2", "granite", "stablelm", "mistral")
FAMILIES = ("bart", "mbart", "marian", "pegasus", "t5", "mt5", "umt5")
KINDS = ("single", "single", "single", "batch", "prefix_cache", "continue", "encoder_decoder")
PAD = 0
CONTINUATION = 8  # tokens plain generate continues with from a returned cache
ORIGINAL = 48  # original length of the scaled RoPE drawn: prompts (up to 40) plus new tokens (up to 40) cross it


@dataclass
class Case:
    seed: int
    kind: str
    model: tuple  # (arch or family, attn_implementation, position table size or None, scaled RoPE type or None)
    config: dict[str, Any]
    prompts: list[tuple[int, int, bool]]  # (seed, length, with a repeated span)
    generate: dict[str, Any] = field(default_factory=dict)
    extras: dict[str, Any] = field(default_factory=dict)  # stop strings, a custom criterion, the cache prefix length


class SumAbove(StoppingCriteria):
    """Stops a row once the sum of its last 3 tokens passes `limit` (a custom criterion without eos_token_id)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit

    def __call__(self, input_ids, scores, **kwargs):
        return input_ids[:, -3:].sum(-1) > self.limit


def _config(rng: random.Random, sampling: bool) -> dict[str, Any]:
    """Random valid LookaheadConfig fields (pool-only configs included)."""
    while True:
        draft = rng.choice(["lookahead", "lookahead", "lookahead", "retrieval", "recycling", "merged"])
        fields = dict(window_size=rng.choice([0, 0, 1, 2, 3, 5, 7]), ngram_size=rng.randint(2, 6),
                      guess_set_size=rng.choice([0, 1, 2, 4, 8]), pool_from_prompt=rng.random() < 0.8,
                      pool_from_output=rng.random() < 0.8, pool_match_tokens=rng.choice([1, 1, 2]),
                      attention=rng.choice(["auto", "auto", "mask", "split", "flex"]), seed=rng.randint(0, 9),
                      enabled=rng.random() < 0.95, draft=draft)
        if draft != "lookahead":
            fields.update(adaptive=rng.random() < 0.5, step_budget=rng.choice([1, 4, 8, 16, 32]))
            width = rng.choice([1, 4, 8])  # drawn for every draft, so the random stream of later cases stays put
            if draft != "retrieval":
                fields["draft_options"] = dict(recycling_width=width)
            if draft != "merged":
                fields["window_size"] = 0
        if rng.random() < 0.3:
            fields["pool_capacity"] = fields["guess_set_size"] + rng.randint(1, 8)
        if sampling:
            fields["sampling_seed"] = rng.randint(0, 99)
        try:
            lade.LookaheadConfig(**fields)
        except ValueError:
            continue
        return fields


def _generate_kwargs(rng: random.Random, kind: str) -> tuple[dict[str, Any], dict[str, Any]]:
    kw: dict[str, Any] = dict(max_new_tokens=rng.randint(1, 40), pad_token_id=PAD)
    extras: dict[str, Any] = {}
    kw["eos_token_id"] = rng.choice([None, None, rng.randint(3, VOCAB - 1), [rng.randint(3, VOCAB - 1),
                                                                            rng.randint(3, VOCAB - 1)]])
    if rng.random() < 0.2:
        kw.update(do_sample=True, top_k=1)  # sampling whose every node has one token of probability 1: greedy output
    else:
        kw["do_sample"] = False
    for name, value in (("repetition_penalty", 1.3), ("no_repeat_ngram_size", 3), ("min_new_tokens", 5),
                        ("bad_words_ids", [[5], [7, 8]]), ("sequence_bias", {(9,): 2.0}), ("suppress_tokens", [4, 6])):
        if rng.random() < 0.15:
            kw[name] = value
    if kind in ("single", "batch") and rng.random() < 0.25:
        kw.update(return_dict_in_generate=True, output_scores=rng.random() < 0.7, output_logits=rng.random() < 0.5)
    if kind != "batch" and kind != "encoder_decoder":
        if rng.random() < 0.15:
            extras["stop_strings"] = [char_tokenizer().decode([rng.randint(3, VOCAB - 1), rng.randint(3, VOCAB - 1)])]
        if rng.random() < 0.15:
            extras["sum_above"] = rng.randint(150, 250)
    return kw, extras


def case(seed: int) -> Case:
    rng = random.Random(seed)
    kind = rng.choice(KINDS)
    if kind == "encoder_decoder":
        model = (rng.choice(FAMILIES), rng.choice(["eager", "sdpa"]), None)
    else:
        model = (rng.choice(ARCHS), rng.choice(["eager", "sdpa"]), rng.choice([None, None, None, 64]))
    generate, extras = _generate_kwargs(rng, kind)
    config = _config(rng, generate["do_sample"])
    if kind == "encoder_decoder":
        config["attention"] = rng.choice(["auto", "mask"])
    rows = rng.randint(2, 4) if kind == "batch" else 1
    longest = 30 if kind == "continue" and model[2] is not None else 40
    prompts = [(rng.randint(0, 10**6), rng.randint(1 if kind != "prefix_cache" else 4, longest), rng.random() < 0.7)
               for _ in range(rows)]
    if kind == "prefix_cache":
        extras["cached"] = rng.randint(1, prompts[0][1] - 1)
    if model[2] is not None:  # keep the whole run (and a continuation) inside the position table
        room = model[2] - max(p[1] for p in prompts) - 1 - (CONTINUATION if kind == "continue" else 0)
        generate["max_new_tokens"] = max(1, min(generate["max_new_tokens"], room))
    rope = None
    if kind != "encoder_decoder" and model[2] is None and rope_types(model[0]) and rng.random() < 0.5:
        rope = rng.choice(rope_types(model[0]))
        if kind == "batch" and rope in POSITION_DEPENDENT:  # lade refuses batches that cross it (tests/test_rope.py)
            room = ORIGINAL + 1 - max(p[1] for p in prompts)
            generate["max_new_tokens"] = max(1, min(generate["max_new_tokens"], room))
    if kind in ("single", "batch", "encoder_decoder") and rng.random() < 0.25:  # drawn last: earlier draws stay put
        _beams(rng, generate, config, rope is not None and rope in POSITION_DEPENDENT, prompts)
    return Case(seed, kind, (*model, rope), config, prompts, generate, extras)


def _beams(rng: random.Random, generate: dict[str, Any], config: dict[str, Any], position_dependent: bool,
           prompts: list[tuple[int, int, bool]]) -> None:
    """Make the case a beam search: k beams, deterministic, a pool draft (what lade's beam search drafts with)."""
    generate.update(num_beams=rng.randint(2, 6), do_sample=False, length_penalty=rng.choice([1.0, 1.0, 0.5, -1.0]),
                    early_stopping=rng.choice([False, True, "never"]))
    generate.pop("top_k", None)
    generate["num_return_sequences"] = rng.randint(1, generate["num_beams"])
    config.update(draft="lookahead", window_size=0, guess_set_size=max(1, config["guess_set_size"]),
                  step_budget=rng.choice([2, 8, 16, 32]), pool_from_prompt=True, sampling_seed=None)
    for name in ("adaptive", "draft_options"):
        config.pop(name, None)
    if position_dependent:  # the B * k rows are a batch: lade refuses batches that cross it (tests/test_rope.py)
        room = ORIGINAL + 1 - max(p[1] for p in prompts)
        generate["max_new_tokens"] = max(1, min(generate["max_new_tokens"], room))


@lru_cache(maxsize=64)
def _model(spec: tuple):
    name, attn, table, rope = spec
    if name in FAMILIES:
        return tiny_seq2seq(name, attn)
    extra = {} if table is None else dict(max_position_embeddings=table)
    extra.update(scaled_rope(name, rope, ORIGINAL) if rope else {})
    return tiny_model(name, attn, **({"sliding_window": None} if name == "mistral" else {}), **extra)


def _inputs(case: Case) -> tuple[torch.Tensor, torch.Tensor]:
    prompts = [random_prompt(seed, length=length, repeat=repeat)[0] for seed, length, repeat in case.prompts]
    return lade.left_pad(prompts, PAD)


def _kwargs(case: Case) -> dict[str, Any]:
    kw = dict(case.generate)
    if "stop_strings" in case.extras:
        kw.update(stop_strings=case.extras["stop_strings"], tokenizer=char_tokenizer())
    if "sum_above" in case.extras:
        kw["stopping_criteria"] = StoppingCriteriaList([SumAbove(case.extras["sum_above"])])
    return kw


def _prefix(model, ids: torch.Tensor, length: int) -> DynamicCache:
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model(ids[:, :length], cache=cache, use_cache=True)
    return cache


def _fresh(model):
    """The model, or for dynamic-NTK RoPE (frequencies kept on the model across calls) a copy in its built state, so
    that every decode starts from the same state."""
    dynamic = any(getattr(m, "rope_type", None) == "dynamic" for m in model.modules())
    return copy.deepcopy(model) if dynamic else model


def _both(model, ids, mask, config, kw, **extra):
    want = _fresh(model).generate(ids, attention_mask=mask, **kw, **extra.get("plain", {}))
    got = lade.generate(_fresh(model), ids, config, attention_mask=mask, **kw, **extra.get("lade", {}))
    return got, want


def run(case: Case) -> str | None:
    """Decode `case` with lade and with plain generate; a description of the first difference, or None."""
    torch.manual_seed(case.seed)
    model = _model(case.model)
    config = lade.LookaheadConfig(**case.config)
    ids, mask = _inputs(case)
    kw = _kwargs(case)
    if case.kind == "prefix_cache":
        n = case.extras["cached"]
        got, want = _both(model, ids, mask, config, kw, plain={"cache": _prefix(model, ids, n)},
                          lade={"cache": _prefix(model, ids, n)})
    elif case.kind == "continue":
        first = dict(kw, return_dict_in_generate=True)
        got, want = _both(model, ids, mask, config, first)
        if not torch.equal(got.sequences, want.sequences):
            return f"first part differs:\n  lade  {got.sequences.tolist()}\n  plain {want.sequences.tolist()}"
        if got.cache.get_seq_length() != want.cache.get_seq_length():
            return f"returned cache holds {got.cache.get_seq_length()} tokens, plain {want.cache.get_seq_length()}"
        more = dict(do_sample=False, max_new_tokens=CONTINUATION, eos_token_id=None, pad_token_id=PAD)
        seq = want.sequences
        got = _fresh(model).generate(seq, attention_mask=torch.ones_like(seq), cache=got.cache, **more)
        want = _fresh(model).generate(seq, attention_mask=torch.ones_like(seq), cache=want.cache, **more)
    else:
        got, want = _both(model, ids, mask, config, kw)
    return _difference(got, want)


def _difference(got, want) -> str | None:
    if isinstance(want, torch.Tensor):
        return None if torch.equal(got, want) else f"sequences differ:\n  lade  {got.tolist()}\n  plain {want.tolist()}"
    if not torch.equal(got.sequences, want.sequences):
        return f"sequences differ:\n  lade  {got.sequences.tolist()}\n  plain {want.sequences.tolist()}"
    if getattr(want, "beam_indices", None) is not None and not torch.equal(got.beam_indices, want.beam_indices):
        return "beam_indices differ"
    theirs = getattr(want, "sequences_scores", None)
    if theirs is not None and not torch.allclose(got.sequences_scores, theirs, atol=1e-4, rtol=1e-4):
        return "sequences_scores differ"
    for name in ("scores", "logits"):
        ours, theirs = getattr(got, name), getattr(want, name)
        if (ours is None) != (theirs is None) or (ours is not None and len(ours) != len(theirs)):
            counts = [None if x is None else len(x) for x in (ours, theirs)]
            return f"{name}: lade {counts[0]} entries, plain {counts[1]}"
        for i, (a, b) in enumerate(zip(ours or (), theirs or ())):
            finite = torch.isfinite(b)
            same = torch.equal(finite, torch.isfinite(a)) and torch.allclose(a[finite], b[finite], atol=1e-4, rtol=1e-4)
            if not same:
                return f"{name}[{i}] differ"
    return None


if __name__ == "__main__":
    drawn = case(int(sys.argv[1]))
    print(drawn)
    print(run(drawn) or "lade == plain generate")
