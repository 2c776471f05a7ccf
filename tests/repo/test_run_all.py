"""./run_all.sh with any local model folder: a tiny random Llama saved with the embedded model's tokenizer runs a
notebook end to end; a chat model gets its chat template (the MT-Bench notebook), a base model the raw prompt (the
HumanEval and GSM8K notebook)."""

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from transformers import AutoTokenizer

from lab.harness.models import prepare_embedded_model
from lab.harness.prompts import load_prompts
from lab.harness.results import load_results
from tiny_models import tiny_model

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def save_tiny_llama(folder: Path, chat_template: bool) -> Path:
    """A 2-layer random Llama with SmolLM2's tokenizer (with or without its chat template)."""
    tokenizer = AutoTokenizer.from_pretrained(prepare_embedded_model())
    if not chat_template:
        tokenizer.chat_template = None
    model = tiny_model("llama", "sdpa", vocab_size=len(tokenizer), max_position_embeddings=8192,
                       bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                       pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


NOTEBOOK = {"mt_bench": ("01_mt_bench_speedup", ["01_mt_bench_speedup"]),
            "humaneval": ("02_humaneval_speedup", ["02_humaneval_speedup", "02_gsm8k_speedup"])}  # figures


def run_quick(folder: Path, out: Path, prompt_set: str) -> pd.DataFrame:
    """./run_all.sh --quick --model FOLDER --only <the notebook of prompt_set> (set-up skipped: the suite ran it);
    its results on prompt_set."""
    notebook, figures = NOTEBOOK[prompt_set]
    env = dict(os.environ, LADE_SKIP_SETUP="1", LADE_VENV=sys.prefix, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1",
               LADE_RESULTS_DIR=str(out / "results"), LADE_FIGURES_DIR=str(out / "figures"),
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([str(REPO / "run_all.sh"), "--quick", "--model", str(folder), "--only", notebook],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"[1/1] {notebook} ... ok" in done.stdout
    for figure in figures:
        assert (out / "figures" / "quick" / f"{figure}.png").stat().st_size > 1000
    return load_results(out / "results" / "quick" / f"{prompt_set}.jsonl")


def test_a_local_chat_model_gets_its_chat_template(tmp_path):
    rows = run_quick(save_tiny_llama(tmp_path / "tiny-chat-llama", True), tmp_path / "out", "mt_bench")
    assert set(rows["model"]) == {"tiny-chat-llama"} and set(rows["prompt_format"]) == {"chat"}
    first = load_prompts("mt_bench", n=1)[0]["prompt"]
    text = rows[rows["prompt_id"] == rows["prompt_id"].iloc[0]]["prompt_text"].iloc[0]
    assert text.startswith("<|im_start|>") and first in text and text.endswith("<|im_start|>assistant\n")
    assert rows["matches_greedy"].all() and set(rows["dtype"]) == {"float32"}
    assert rows.attrs["provenance"]["lock_sha256"]


def test_a_base_model_without_chat_template_gets_the_raw_prompt(tmp_path):
    rows = run_quick(save_tiny_llama(tmp_path / "tiny-base-llama", False), tmp_path / "out", "humaneval")
    assert set(rows["model"]) == {"tiny-base-llama"} and set(rows["prompt_format"]) == {"raw"}
    expected = {str(r["id"]): r["prompt"] for r in load_prompts("humaneval")}  # whichever prompts each method ran
    for row in rows.itertuples():
        assert row.prompt_text == expected[row.prompt_id]  # the completion prompt exactly, no template
    assert rows["matches_greedy"].all()
