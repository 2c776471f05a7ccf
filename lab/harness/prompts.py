"""Prompt sets as `datasets.Dataset`s with at least the columns `id` (str) and `prompt` (str), and how a prompt is
turned into model input (a prompt format).

Frozen in this repository (data/prompts/, see its MANIFEST.json), read offline:
- "mt_bench": 80 questions; `prompt` is the first turn, plus `category`, `turns`.
- "humaneval": 164 problems; `prompt` is the code prompt, plus `entry_point`, `canonical_solution`, `test`.
- "gsm8k": the 1,319 GSM8K test problems; `prompt` is the question, plus `answer`.
- "spec_bench": Spec-Bench's 480 questions; `prompt` is the first turn, plus `category` (13 categories), `task`
  (Spec-Bench's six tasks, SPEC_BENCH_TASKS) and `turns`. `load_prompts("spec_bench", category=...)` or
  `load_prompts("spec_bench:summarization")` takes one category or task.
Each frozen set's last prompts are the tuning split (lab.harness.splits): load_prompts leaves them out unless split=
asks.
Not shipped by any registry package, so taken from a local file (`path=`) or the Hugging Face Hub:
"cnn_dailymail", "xsum", "classeval".
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import torch
from datasets import Dataset, load_dataset
from transformers import PreTrainedTokenizerBase

from lab.harness.models import hub_offline
from lab.harness.paths import DATA_DIR
from lab.harness.splits import select_split

PROMPT_DIR = DATA_DIR / "prompts"
SUMMARY_PREFIX = "Summarize: "  # Spec-Bench's summarization turns start with it (our Hub summarization sets too)


@dataclass(frozen=True)
class HubSet:
    repo: str  # Hub dataset id
    config: str | None
    split: str
    id_field: str | None  # None: use the row index
    text_field: str
    template: str  # how `prompt` is built from the text field


HUB_SETS = {
    "cnn_dailymail": HubSet("abisee/cnn_dailymail", "3.0.0", "test", "id", "article", SUMMARY_PREFIX + "{text}"),
    "xsum": HubSet("EdinburghNLP/xsum", None, "test", "id", "document", SUMMARY_PREFIX + "{text}"),
    "classeval": HubSet("FudanSELab/ClassEval", None, "test", "task_id", "skeleton", "{text}"),
}
FROZEN_FILES = {"mt_bench": "mt_bench.jsonl", "humaneval": "humaneval.jsonl", "gsm8k": "gsm8k/test.jsonl",
                "spec_bench": "spec_bench/question.jsonl"}
FROZEN_SETS = tuple(FROZEN_FILES)
# Spec-Bench's six tasks (its leaderboard's columns) -> the categories of its question.jsonl
MT_BENCH_CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")
SPEC_BENCH_TASKS = {"mt_bench": MT_BENCH_CATEGORIES, "translation": ("translation",),
                    "summarization": ("summarization",), "qa": ("qa",), "math_reasoning": ("math_reasoning",),
                    "rag": ("rag",)}
SPEC_BENCH_CATEGORIES = tuple(c for cats in SPEC_BENCH_TASKS.values() for c in cats)


def verify_frozen() -> list[str]:
    """Check every frozen prompt file against data/prompts/MANIFEST.json; return the names checked."""
    manifest = json.loads((PROMPT_DIR / "MANIFEST.json").read_text())
    for entry in manifest.values():
        actual = hashlib.sha256((PROMPT_DIR / entry["file"]).read_bytes()).hexdigest()
        if actual != entry["sha256"]:
            raise RuntimeError(f"{entry['file']}: sha256 {actual} != manifest {entry['sha256']}; "
                               f"regenerate with `python scripts/freeze_prompts.py`")
    return list(manifest)


class DatasetUnavailableError(RuntimeError):
    """A prompt set that is neither frozen here, nor a readable local file, nor reachable on the Hub."""


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _mt_bench(rows: list[dict]) -> dict[str, list]:
    return {"id": [str(r["question_id"]) for r in rows], "category": [r["category"] for r in rows],
            "prompt": [r["turns"][0] for r in rows], "turns": [r["turns"] for r in rows]}


def _humaneval(rows: list[dict]) -> dict[str, list]:
    columns = ("prompt", "entry_point", "canonical_solution", "test")
    return {"id": [r["task_id"] for r in rows]} | {c: [r[c] for r in rows] for c in columns}


def _gsm8k(rows: list[dict]) -> dict[str, list]:
    return {"id": [str(i) for i in range(len(rows))], "prompt": [r["question"] for r in rows],
            "answer": [r["answer"] for r in rows]}


def _spec_bench(rows: list[dict]) -> dict[str, list]:
    task_of = {c: task for task, cats in SPEC_BENCH_TASKS.items() for c in cats}
    return _mt_bench(rows) | {"task": [task_of[r["category"]] for r in rows]}


READERS = {"mt_bench": _mt_bench, "humaneval": _humaneval, "gsm8k": _gsm8k, "spec_bench": _spec_bench}


def _unavailable(name: str, spec: HubSet, reason: str) -> DatasetUnavailableError:
    return DatasetUnavailableError(
        f"prompt set {name!r} is not frozen in this repository (no registry package ships it) and "
        f"{reason}. Pass path=<local .jsonl/.json/.csv/.parquet file with a {spec.text_field!r} column>, "
        f"or run where the Hugging Face Hub is reachable (dataset {spec.repo!r}, split {spec.split!r}).")


def _hub_or_file(name: str, path: str | Path | None) -> Dataset:
    spec = HUB_SETS[name]
    if path is not None:
        file = Path(path).expanduser()
        if not file.is_file():
            raise _unavailable(name, spec, f"the file {str(file)!r} does not exist")
        kind = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}.get(file.suffix)
        if kind is None:
            raise _unavailable(name, spec, f"{file.name!r} is not a .jsonl/.json/.csv/.parquet file")
        raw = load_dataset(kind, data_files=str(file), split="train")
    elif hub_offline():
        raise _unavailable(name, spec, "HF_HUB_OFFLINE / HF_DATASETS_OFFLINE is set")
    else:
        try:
            raw = load_dataset(spec.repo, spec.config, split=spec.split)
        except (OSError, ConnectionError, ValueError) as err:  # no network, unknown repo, ...
            raise _unavailable(name, spec, f"loading it from the Hub failed ({type(err).__name__})") from err
    ids = raw[spec.id_field] if spec.id_field in raw.column_names else range(len(raw))
    raw = raw.add_column("id", [str(i) for i in ids]) if "id" not in raw.column_names else raw
    return raw.map(lambda r: {"prompt": spec.template.format(text=r[spec.text_field])})


def split_set_name(name: str, category: str | None = None) -> tuple[str, str | None]:
    """'spec_bench:summarization' -> ('spec_bench', 'summarization'); a category given twice must agree."""
    base, _, suffix = name.partition(":")
    if suffix and category and suffix != category:
        raise ValueError(f"prompt set {name!r} names category {suffix!r} but category={category!r} was passed")
    return base, suffix or category


def _in_category(rows: list[dict], name: str, category: str) -> list[dict]:
    if name != "spec_bench":
        raise ValueError(f"prompt set {name!r} has no categories; only 'spec_bench' does")
    wanted = SPEC_BENCH_TASKS.get(category, (category,))
    if not set(wanted) <= set(SPEC_BENCH_CATEGORIES):
        raise ValueError(f"unknown Spec-Bench category {category!r}; choose a task {tuple(SPEC_BENCH_TASKS)} "
                         f"or a category {SPEC_BENCH_CATEGORIES}")
    return [r for r in rows if r["category"] in wanted]


def load_prompts(name: str, n: int | None = None, path: str | Path | None = None,
                 category: str | None = None, split: str = "evaluation") -> Dataset:
    """Load prompt set `name` (first `n` rows if given) as a Dataset with `id` and `prompt` columns.

    name: a set, or 'spec_bench:CATEGORY'; category: a Spec-Bench task (SPEC_BENCH_TASKS) or category.
    path: a local file to read instead of the frozen copy / the Hub (same columns as the original set).
    split: "evaluation" (every prompt outside the tuning split, lab.harness.splits), "tuning" or "all".
    """
    name, category = split_set_name(name, category)
    if name in FROZEN_SETS:
        rows = _read_jsonl(Path(path) if path else PROMPT_DIR / FROZEN_FILES[name])
        data = Dataset.from_dict(READERS[name](_in_category(rows, name, category) if category else rows))
    elif name in HUB_SETS and category is None:
        data = _hub_or_file(name, path)
    elif name in HUB_SETS:
        raise ValueError(f"prompt set {name!r} has no categories; only 'spec_bench' does")
    else:
        raise ValueError(f"unknown prompt set {name!r}; choose from {FROZEN_SETS + tuple(HUB_SETS)}")
    return select_split(data, f"{name}:{category}" if category else name, n, split)


# ---- prompt formats: how a prompt becomes model input ------------------------------------------------------------
# chat: the tokenizer's chat template around one user turn; raw: the prompt text as is (the tokenizer adds its BOS);
# auto: chat when the tokenizer has a template, else raw; reference: as the reference implementation's evaluation
# scripts (hao-ai-lab/LookaheadDecoding applications/) did: HumanEval raw, CNN/DailyMail and XSum in its Llama-2
# "[INST] <<SYS>>" summarization prompt (raw), everything else (MT-Bench) through the chat template; vicuna: FastChat's
# Vicuna v1.1 conversation (Spec-Bench's evaluation scripts; Vicuna v1.3 tokenizers carry no chat template).
PROMPT_FORMATS = ("auto", "chat", "raw", "reference", "vicuna")
VICUNA = ("A chat between a curious user and an artificial intelligence assistant. The assistant gives helpful, "
          "detailed, and polite answers to the user's questions. USER: {prompt} ASSISTANT:")
REFERENCE_SUMMARY = (
    "[INST] <<SYS>>\nYou are an intelligent chatbot. Answer the questions only using the following context:\n\n"
    "{document}\n\nHere are some rules you always follow:\n\n"
    "- Generate human readable output, avoid creating output with gibberish text.\n"
    "- Generate only the requested output, don't include any other language before or after the requested output.\n"
    "- Never say thank you, that you are happy to help, that you are an AI agent, etc. Just answer directly.\n"
    "- Generate professional language typically used in business documents in North America.\n"
    "- Never generate offensive or foul language.\n\n<</SYS>>\n\nBriefly summarize the given context. [/INST]\n"
    "Summary: ")


@dataclass(frozen=True)
class EncodedPrompt:
    input_ids: torch.Tensor  # [1, T]
    attention_mask: torch.Tensor  # [1, T], all ones
    text: str  # exactly what was tokenized
    format: str  # "chat" or "raw" (what auto / reference resolved to)


def _resolve_format(tokenizer: PreTrainedTokenizerBase, prompt: str, prompt_set: str,
                    prompt_format: str) -> tuple[str, str]:
    """(format actually used, text to tokenize) for one prompt."""
    if prompt_format not in PROMPT_FORMATS:
        raise ValueError(f"prompt_format {prompt_format!r} is not one of {PROMPT_FORMATS}")
    if prompt_format == "reference":
        base, category = split_set_name(prompt_set)
        if base == "humaneval":
            return "raw", prompt
        if category == "summarization" or base in ("cnn_dailymail", "xsum"):
            return "raw", REFERENCE_SUMMARY.format(document=prompt.removeprefix(SUMMARY_PREFIX))
        prompt_format = "chat"
    if prompt_format == "vicuna":
        return "raw", VICUNA.format(prompt=prompt)
    if prompt_format == "auto":
        prompt_format = "chat" if tokenizer.chat_template else "raw"
    if prompt_format == "chat" and not tokenizer.chat_template:
        raise ValueError(f"{getattr(tokenizer, 'name_or_path', 'this tokenizer')!r} has no chat template (a base "
                         "model?): use prompt_format 'raw' (or 'auto') for it in the spec or notebook parameters")
    return prompt_format, prompt


def encode_prompt(tokenizer: PreTrainedTokenizerBase, prompt: str, prompt_set: str = "",
                  prompt_format: str = "auto") -> EncodedPrompt:
    """Model input for `prompt` of `prompt_set` in `prompt_format` (see PROMPT_FORMATS).

    Always pass the returned mask to `generate`: SmolLM2's pad token `<|im_end|>` occurs in every chat
    prompt, and a mask inferred from the pad id would hide those prompt tokens.
    """
    fmt, text = _resolve_format(tokenizer, prompt, prompt_set, prompt_format)
    if fmt == "chat":
        text = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                             tokenize=False)
    # a rendered chat template already holds its special tokens; a raw prompt gets the tokenizer's BOS
    input_ids = tokenizer(text, add_special_tokens=fmt == "raw", return_tensors="pt")["input_ids"]  # [1, T]
    return EncodedPrompt(input_ids, torch.ones_like(input_ids), text, fmt)


@dataclass(frozen=True)
class Prompt:
    """One prompt of a set as the benchmarks feed it (lab.harness.bench, lab.harness.batched): where it comes from, its
    encoding, and its ids on the model's device."""

    set_name: str  # the set as asked for ("mt_bench", "spec_bench", "spec_bench:qa", ...)
    prompt_id: str
    encoded: EncodedPrompt
    ids: tuple[torch.Tensor, torch.Tensor]  # input ids, attention mask on the model's device: [1, T], [1, T]
    all_methods: bool = True  # among the prompts every method runs (lab.harness.bench: else its headline methods only)

    @property
    def tokens(self) -> torch.Tensor:
        """The encoded prompt's ids, [T] (on the CPU), as a batch's rows are padded from them."""
        return self.encoded.input_ids[0]


def encode_prompts(tokenizer: PreTrainedTokenizerBase, set_name: str, rows, prompt_format: str = "auto",
                   device: torch.device | str = "cpu", all_methods: int | None = None) -> list[Prompt]:
    """Encode rows of a prompt set (dicts, or a load_prompts Dataset, with `id`, `prompt` and optionally `encode_as`:
    the set whose prompt format applies, default `set_name`); the first `all_methods` rows (default: every row) are
    the ones every method runs."""
    prompts = []
    for j, row in enumerate(rows):
        encoded = encode_prompt(tokenizer, row["prompt"], row.get("encode_as") or set_name, prompt_format)
        ids = (encoded.input_ids.to(device), encoded.attention_mask.to(device))
        prompts.append(Prompt(set_name, str(row["id"]), encoded, ids, all_methods is None or j < all_methods))
    return prompts


def encode_chat(tokenizer: PreTrainedTokenizerBase, prompt: str,
                system: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Chat-template `prompt` for an instruct model: (input_ids [1, T], attention_mask [1, T] of ones)."""
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    encoded = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                            return_dict=True)
    input_ids = encoded["input_ids"]  # [1, T]
    return input_ids, torch.ones_like(input_ids)
