"""Prompt sets as `datasets.Dataset`s with at least the columns `id` (str) and `prompt` (str).

Frozen in this repository (data/prompts/, see its MANIFEST.json): "mt_bench" (80 questions; `prompt` is
the first turn, plus `category`, `turns`) and "humaneval" (164 problems; `prompt` is the code prompt,
plus `entry_point`, `canonical_solution`, `test`). Not shipped by any registry package, so taken from a
local file (`path=`) or the Hugging Face Hub: "gsm8k", "cnn_dailymail", "xsum", "classeval".
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from datasets import Dataset, load_dataset
from transformers import PreTrainedTokenizerBase

from .models import hub_offline
from .paths import DATA_DIR

PROMPT_DIR = DATA_DIR / "prompts"


@dataclass(frozen=True)
class HubSet:
    repo: str  # Hub dataset id
    config: str | None
    split: str
    id_field: str | None  # None: use the row index
    text_field: str
    template: str  # how `prompt` is built from the text field


HUB_SETS = {
    "gsm8k": HubSet("openai/gsm8k", "main", "test", None, "question", "{text}"),
    "cnn_dailymail": HubSet("abisee/cnn_dailymail", "3.0.0", "test", "id", "article",
                            "Summarize the following news article.\n\n{text}"),
    "xsum": HubSet("EdinburghNLP/xsum", None, "test", "id", "document",
                   "Summarize the following article in one sentence.\n\n{text}"),
    "classeval": HubSet("FudanSELab/ClassEval", None, "test", "task_id", "skeleton", "{text}"),
}
FROZEN_SETS = ("mt_bench", "humaneval")


def verify_frozen() -> list[str]:
    """Check every frozen prompt file against data/prompts/MANIFEST.json; return the names checked."""
    manifest = json.loads((PROMPT_DIR / "MANIFEST.json").read_text())
    for name, entry in manifest.items():
        actual = hashlib.sha256((PROMPT_DIR / entry["file"]).read_bytes()).hexdigest()
        if actual != entry["sha256"]:
            raise RuntimeError(f"{entry['file']}: sha256 {actual} != manifest {entry['sha256']}; "
                               f"regenerate with `python scripts/freeze_prompts.py`")
    return list(manifest)


class DatasetUnavailableError(RuntimeError):
    """A prompt set that is neither frozen here, nor a readable local file, nor reachable on the Hub."""


def _read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _mt_bench(path: Path) -> Dataset:
    rows = _read_jsonl(path)
    return Dataset.from_dict({
        "id": [str(r["question_id"]) for r in rows],
        "category": [r["category"] for r in rows],
        "prompt": [r["turns"][0] for r in rows],
        "turns": [r["turns"] for r in rows],
    })


def _humaneval(path: Path) -> Dataset:
    rows = _read_jsonl(path)
    columns = ("prompt", "entry_point", "canonical_solution", "test")
    return Dataset.from_dict({"id": [r["task_id"] for r in rows]} | {c: [r[c] for r in rows] for c in columns})


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
    return raw.add_column("id", [str(i) for i in ids]) if "id" not in raw.column_names else raw


def load_prompts(name: str, n: int | None = None, path: str | Path | None = None) -> Dataset:
    """Load prompt set `name` (first `n` rows if given) as a Dataset with `id` and `prompt` columns.

    path: a local file to read instead of the frozen copy / the Hub (same columns as the original set).
    """
    if name in FROZEN_SETS:
        reader = _mt_bench if name == "mt_bench" else _humaneval
        data = reader(Path(path) if path is not None else PROMPT_DIR / f"{name}.jsonl")
    elif name in HUB_SETS:
        data = _hub_or_file(name, path)
        spec = HUB_SETS[name]
        data = data.map(lambda r: {"prompt": spec.template.format(text=r[spec.text_field])})
    else:
        raise ValueError(f"unknown prompt set {name!r}; choose from {FROZEN_SETS + tuple(HUB_SETS)}")
    return data.select(range(min(n, len(data)))) if n is not None else data


def encode_chat(tokenizer: PreTrainedTokenizerBase, prompt: str,
                system: str | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Chat-template `prompt` for an instruct model: (input_ids [1, T], attention_mask [1, T] of ones).

    Always pass the returned mask to `generate`: SmolLM2's pad token `<|im_end|>` occurs in every chat
    prompt, and a mask inferred from the pad id would hide those prompt tokens.
    """
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    encoded = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                            return_dict=True)
    input_ids = encoded["input_ids"]  # [1, T]
    return input_ids, torch.ones_like(input_ids)


if __name__ == "__main__":  # python -m lade.lab.prompts verify
    if sys.argv[1:] != ["verify"]:
        sys.exit("usage: python -m lade.lab.prompts verify")
    print("frozen prompt sets verified:", ", ".join(verify_frozen()))
