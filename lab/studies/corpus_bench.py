"""Notebook 10: lade auto drafting from a corpus of earlier requests (lade.Corpus) against plain greedy.

Two workloads, each paired with greedy on the same prompts:
- Spec-Bench by task as the corpus grows, under one of two protocols (`protocol`):
  - "preceding" (the default; issue 58's): a task's questions after its first max(sizes) are measured (`n_prompts`
    of them); the corpus is filled by lade itself (`lade.generate(..., corpus=)`, lade auto) decoding, in order, the
    max(sizes) questions that precede them, then frozen; a smaller size holds the last `size` of those requests;
  - "following" (the earlier one): a task's first `n_prompts` questions are measured; the corpus holds the prompts
    and outputs of the next `size` questions, decoded by plain batched greedy (`served`);
  either way never a measured question, and each size clipped to the questions the task has;
- two-turn MT-Bench (data/prompts/mt_bench_two_turns.jsonl): the second turn of each conversation is measured, its
  prompt holding the first turn and the model's greedy answer; the corpus holds every conversation's first turn
  (prompt and answer), as a server that kept its earlier requests would.

Under "following" (and for the two-turn workload) the earlier requests are decoded once by plain batched greedy
(`served`: the tokens lade would return, being exact, in a fraction of the time), then each corpus learns them in order
(`FrozenCorpus.of`, measuring its drafts on each). Every corpus is frozen before the measured calls, so a measured call
never learns from itself or from another measured prompt; every measured prompt is timed bench.REPEATS times, the
methods interleaved.
Rows: lab.harness.bench's ROW_COLUMNS plus CORPUS_COLUMNS.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pandas as pd
import torch

import lade
from lab.harness import bench
from lab.harness.methods import Method
from lab.harness.prompts import PROMPT_DIR, EncodedPrompt, Prompt, encode_prompt, load_prompts
from lab.harness.provenance import model_record, provenance
from lab.harness.stats import aa_name

FILL_BATCH = 16  # earlier requests decoded at once (plain batched greedy) to fill a corpus
TWO_TURNS = "mt_bench_two_turns"  # the frozen repeated-workload set (data/prompts/MANIFEST.json)
CORPUS_COLUMNS = {
    "workload": "spec_bench (the corpus holds other questions of the task) or two_turns (turn 2 after turn 1)",
    "corpus_requests": "requests in the method's corpus (0: lade auto without a corpus; -1: greedy)",
}


PROTOCOLS = ("preceding", "following")  # where a Spec-Bench task's corpus comes from (module docstring)


class FrozenCorpus(lade.Corpus):
    """A corpus that drafts but does not learn the calls it serves (so every measured call sees the same corpus);
    while `learning` is set (filling it by lade's own calls) it learns like lade.Corpus."""

    learning = False

    def add(self, tokens: Sequence[int], prompt_length: int = 0) -> None:
        if self.learning:
            lade.Corpus.add(self, tokens, prompt_length)

    @classmethod
    def of(cls, requests: Sequence[tuple[Sequence[int], int]]) -> FrozenCorpus:
        """requests: (tokens, prompt length) each, learned in order (the corpus measures its drafts on each output)."""
        corpus = cls(max_tokens=max(1, sum(len(tokens) for tokens, _ in requests)))
        for tokens, prompt_length in requests:
            lade.Corpus.add(corpus, tokens, prompt_length)
        return corpus


def corpus_method(corpus: lade.Corpus | None, requests: int) -> Method:
    """lade auto with `corpus` (None: lade auto alone), named by the requests it holds."""
    if corpus is None:
        return Method.auto()
    return Method(f"lade-auto+corpus({requests})", "lade", "auto:mixed", generate_kwargs={"corpus": corpus})


def two_turn_rows(n: int | None = None) -> list[dict]:
    """The frozen two-turn conversations: {id, category, turns: [first, second]}."""
    rows = [json.loads(line) for line in (PROMPT_DIR / f"{TWO_TURNS}.jsonl").read_text().splitlines() if line]
    return rows[:n] if n is not None else rows


def served(model, prompts: Sequence[EncodedPrompt], max_new_tokens: int, pad_token_id: int,
           batch: int = FILL_BATCH) -> list[tuple[list[int], int]]:
    """Each prompt's request as a corpus learns it: its tokens and greedy output (no padding) and the prompt's length.
    Decoded by plain batched greedy, `batch` left-padded prompts at a time (the fastest way to serve them here; lade
    would return the same tokens, being exact)."""
    device, requests = next(model.parameters()).device, []
    for start in range(0, len(prompts), batch):
        chunk = [p.input_ids[0][p.attention_mask[0].bool()] for p in prompts[start:start + batch]]  # [T_i] each
        width = max(len(ids) for ids in chunk)
        ids = torch.full((len(chunk), width), pad_token_id, dtype=torch.long)  # [b, width], left-padded
        mask = torch.zeros_like(ids)
        for row, tokens in enumerate(chunk):
            ids[row, width - len(tokens):], mask[row, width - len(tokens):] = tokens, 1
        out = model.generate(ids.to(device), attention_mask=mask.to(device), do_sample=False,
                             max_new_tokens=max_new_tokens, pad_token_id=pad_token_id)  # [b, width + new]
        for row, tokens in enumerate(chunk):
            new = out[row, width:].tolist()
            while new and new[-1] == pad_token_id:  # the padding after a row's end (its EOS stays when it differs)
                new.pop()
            requests.append((tokens.tolist() + new, len(tokens)))
    return requests


def task_requests(model, tokenizer, name: str, start: int, stop: int, max_new_tokens: int,
                  prompt_format: str) -> list[tuple[list[int], int]]:
    """Questions start .. stop of the prompt set `name` as a corpus learns them (`served`)."""
    prompts = [encode_prompt(tokenizer, p, name, prompt_format) for p in load_prompts(name)["prompt"][start:stop]]
    return served(model, prompts, max_new_tokens, _pad(tokenizer))


def lade_filled(model, tokenizer, name: str, stop: int, max_new_tokens: int, prompt_format: str
                ) -> tuple[FrozenCorpus, list[tuple[list[int], int]]]:
    """The corpus lade itself fills decoding questions 0 .. stop of `name` in order (lade auto with `corpus=`, one
    request at a time), frozen; and those requests (tokens, prompt length), for smaller corpora of the same calls."""
    prompts = [encode_prompt(tokenizer, p, name, prompt_format) for p in load_prompts(name, stop)["prompt"]]
    corpus = FrozenCorpus(max_tokens=10**7)
    corpus.learning = True
    device, requests = next(model.parameters()).device, []
    for prompt in prompts:
        out = lade.generate(model, prompt.input_ids.to(device), "auto", attention_mask=prompt.attention_mask.to(device),
                            corpus=corpus, do_sample=False, max_new_tokens=max_new_tokens,
                            pad_token_id=_pad(tokenizer))  # [1, P + new]
        requests.append((out[0].tolist(), prompt.input_ids.shape[1]))
    corpus.learning = False
    return corpus, requests


def spec_bench_rows(model, tokenizer, task: str, sizes: Sequence[int], n_prompts: int, max_new_tokens: int,
                    prompt_format: str, protocol: str = "preceding", repeats: int | None = None) -> pd.DataFrame:
    """One task: n_prompts questions measured with greedy, lade auto and lade auto with a corpus of each size in
    `sizes` (clipped to the task's other questions; 0 is lade auto alone); which questions and corpora: `protocol`
    (module docstring); repeats: timings per question (None: bench.REPEATS)."""
    name = f"spec_bench:{task}"
    if protocol == "preceding":
        skip = min(max(sizes), len(load_prompts(name)) - n_prompts)
        largest, requests = lade_filled(model, tokenizer, name, skip, max_new_tokens, prompt_format) if skip else (
            None, [])
        counts = sorted({min(size, skip) for size in sizes})
        corpora = {k: largest if k == skip else FrozenCorpus.of(requests[skip - k:]) for k in counts if k}
    else:
        skip = 0
        requests = task_requests(model, tokenizer, name, n_prompts, n_prompts + max(sizes), max_new_tokens,
                                 prompt_format)
        counts = sorted({min(size, len(requests)) for size in sizes})
        corpora = {k: FrozenCorpus.of(requests[:k]) for k in counts if k}
    methods = [corpus_method(corpora.get(k), k) for k in counts]
    rows = bench.run_benchmark(model, tokenizer, [name], methods, max_new_tokens, n_prompts, progress=False,
                               prompt_format=prompt_format, skip=skip, repeats=repeats)
    return _with_corpus_columns(rows, "spec_bench", dict(zip((m.name for m in methods), counts)))


def two_turn_benchmark(model, tokenizer, n_prompts: int, max_new_tokens: int,
                       repeats: int | None = None) -> pd.DataFrame:
    """Turn 2 of each conversation, after the model's greedy answer to turn 1, with greedy, lade auto and lade auto
    with the corpus of every conversation's first turn (chat template); repeats: timings per conversation (None:
    bench.REPEATS)."""
    repeats = bench.checked_repeats(repeats)
    rows = two_turn_rows(n_prompts)
    firsts = [_chat(tokenizer, [row["turns"][0]], []) for row in rows]
    requests = served(model, firsts, max_new_tokens, _pad(tokenizer))
    answers = [tokenizer.decode(tokens[length:], skip_special_tokens=True) for tokens, length in requests]
    corpus = FrozenCorpus.of(requests)
    methods = bench._checked_methods([Method.auto(), corpus_method(corpus, len(requests))], (), None)
    methods = [m.resolved(model) for m in methods]
    kwargs = {"do_sample": False, "max_new_tokens": max_new_tokens, "pad_token_id": _pad(tokenizer)}
    device = next(model.parameters()).device
    table = []
    for i, (row, answer) in enumerate(zip(rows, answers)):
        encoded = _chat(tokenizer, row["turns"], [answer])
        prompt = Prompt(TWO_TURNS, str(row["id"]), encoded,
                        (encoded.input_ids.to(device), encoded.attention_mask.to(device)), True)
        runs = bench._rotated_runs(model, methods, prompt, kwargs, repeats, first=i, done=lambda: None)
        table += bench._paired_rows(prompt, methods, runs, repeats)
    name = getattr(model.config, "_name_or_path", "") or type(model).__name__
    df = pd.DataFrame(table).assign(model=name.rstrip("/").rsplit("/", 1)[-1],
                                    dtype=str(model.dtype).removeprefix("torch."))
    return _with_corpus_columns(df[list(bench.ROW_COLUMNS)], "two_turns", {methods[-1].name: len(requests)})


def run_corpus_benchmark(model, tokenizer, tasks: Sequence[str], sizes: Sequence[int], n_prompts: int,
                         two_turn_prompts: int, max_new_tokens: int, prompt_format: str = "auto",
                         protocol: str = "preceding", repeats: int | None = None,
                         **provenance_params: Any) -> pd.DataFrame:
    """Both workloads' rows, provenance in attrs (lab.harness.results.save_results writes it beside them). protocol:
    where a Spec-Bench task's corpus comes from (PROTOCOLS, module docstring); repeats: timings per measured prompt
    (None: bench.REPEATS)."""
    repeats = bench.checked_repeats(repeats)
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {PROTOCOLS}, got {protocol!r}")
    if not sizes or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in sizes):
        raise ValueError(f"sizes must be non-negative integers (0: lade auto without a corpus), got {list(sizes)}")
    parts = [spec_bench_rows(model, tokenizer, task, sizes, n_prompts, max_new_tokens, prompt_format, protocol, repeats)
             for task in tasks]
    parts.append(two_turn_benchmark(model, tokenizer, two_turn_prompts, max_new_tokens, repeats))
    df = pd.concat(parts, ignore_index=True)
    df.attrs["provenance"] = provenance(
        model=getattr(model.config, "_name_or_path", ""), **model_record(model), tasks=list(tasks), sizes=list(sizes),
        n_prompts=n_prompts, two_turn_prompts=two_turn_prompts, max_new_tokens=max_new_tokens,
        prompt_format=prompt_format, protocol=protocol, repeats=repeats, **provenance_params)
    return df


def corpus_summary(rows: pd.DataFrame) -> pd.DataFrame:
    """bench.summarize per prompt set and method, with each method's workload and corpus size."""
    summary = bench.summarize(rows)
    sizes = rows.groupby(["prompt_set", "method"], sort=False)[["workload", "corpus_requests"]].first().reset_index()
    summary = summary.merge(sizes, on=["prompt_set", "method"], how="left")
    summary["task"] = summary["prompt_set"].str.partition(":")[2].where(summary["workload"] == "spec_bench",
                                                                       summary["prompt_set"])
    return summary


def _with_corpus_columns(rows: pd.DataFrame, workload: str, sizes: dict[str, int]) -> pd.DataFrame:
    attrs = rows.attrs
    plain = ("greedy", aa_name("greedy"))  # no lade, no corpus
    rows = rows.assign(workload=workload, corpus_requests=[-1 if m in plain else sizes.get(m, 0)
                                                           for m in rows["method"]])
    rows.attrs = attrs
    return rows


def _chat(tokenizer, turns: Sequence[str], answers: Sequence[str]) -> EncodedPrompt:
    """The chat template over user turns and the assistant's answers between them, ready for the next answer."""
    messages = []
    for k, turn in enumerate(turns):
        messages.append({"role": "user", "content": turn})
        if k < len(answers):
            messages.append({"role": "assistant", "content": answers[k]})
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    input_ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]  # [1, T]
    return EncodedPrompt(input_ids, torch.ones_like(input_ids), text, "chat")


def _pad(tokenizer) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def freeze_two_turns(per_category: int = 2) -> dict[str, Any]:
    """Write data/prompts/mt_bench_two_turns.jsonl: the first `per_category` MT-Bench questions of each category
    (both turns, from the frozen mt_bench.jsonl, unchanged). Returns its manifest fields that change."""
    import hashlib

    rows = [json.loads(line) for line in (PROMPT_DIR / "mt_bench.jsonl").read_text().splitlines() if line]
    picked, seen = [], {}
    for row in rows:
        if seen.get(row["category"], 0) < per_category:
            seen[row["category"]] = seen.get(row["category"], 0) + 1
            picked.append({"id": row["question_id"], "category": row["category"], "turns": row["turns"]})
    text = "".join(json.dumps(row) + "\n" for row in picked)
    (PROMPT_DIR / f"{TWO_TURNS}.jsonl").write_text(text)
    return {"sha256": hashlib.sha256(text.encode()).hexdigest(), "rows": len(picked)}


if __name__ == "__main__":  # python -m lab.studies.corpus_bench freeze
    print(freeze_two_turns())
