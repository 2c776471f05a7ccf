"""Frozen prompt sets match their manifest; loaders return the documented rows and fail clearly offline."""

import csv
import hashlib
import json

import pytest

from lade.lab.prompts import PROMPT_DIR, DatasetUnavailableError, load_prompts, verify_frozen

MANIFEST = json.loads((PROMPT_DIR / "MANIFEST.json").read_text())


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_manifest_checksum_and_rows(name):
    """The frozen file is byte-for-byte what the manifest says was extracted from the wheel."""
    entry = MANIFEST[name]
    data = (PROMPT_DIR / entry["file"]).read_bytes()
    assert hashlib.sha256(data).hexdigest() == entry["sha256"]
    assert len(data.decode().splitlines()) == entry["rows"]
    for key in ("package", "version", "wheel", "wheel_sha256", "licence", "extraction"):
        assert entry[key], key


@pytest.mark.parametrize("name, rows", [("mt_bench", 80), ("humaneval", 164)])
def test_frozen_loaders(name, rows):
    """MT-Bench has 80 questions and HumanEval 164 problems, each with a unique id and a prompt."""
    data = load_prompts(name)
    assert len(data) == rows
    assert len(set(data["id"])) == rows
    assert all(isinstance(p, str) and p.strip() for p in data["prompt"])


def test_mt_bench_prompt_is_first_turn_and_n_limits():
    data = load_prompts("mt_bench", n=3)
    assert len(data) == 3
    assert data[0]["prompt"] == data[0]["turns"][0]
    assert data[0]["category"] == "writing"


def test_humaneval_prompt_is_code():
    row = load_prompts("humaneval", n=1)[0]
    assert row["id"] == "HumanEval/0"
    assert f"def {row['entry_point']}(" in row["prompt"]


@pytest.mark.parametrize("name", ["gsm8k", "cnn_dailymail", "xsum", "classeval"])
def test_unfrozen_sets_fail_offline_with_a_clear_message(name, monkeypatch):
    """Offline, the error says the set is not frozen and what to pass instead (a local file)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DatasetUnavailableError, match="not frozen.*path="):
        load_prompts(name)


def test_unfrozen_set_from_local_file(tmp_path, monkeypatch):
    """A local file with the original columns works without the Hub; `prompt` and `id` are added."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    file = tmp_path / "gsm8k.jsonl"
    file.write_text("\n".join(json.dumps({"question": f"What is {i}+1?", "answer": str(i + 1)}) for i in range(3)))
    data = load_prompts("gsm8k", path=file)
    assert data["prompt"] == ["What is 0+1?", "What is 1+1?", "What is 2+1?"]
    assert data["id"] == ["0", "1", "2"]


def test_missing_local_file_and_unknown_set():
    with pytest.raises(DatasetUnavailableError, match="does not exist"):
        load_prompts("xsum", path="/nonexistent/xsum.jsonl")
    with pytest.raises(ValueError, match="unknown prompt set"):
        load_prompts("nope")


def test_verify_frozen_checks_every_manifest_entry():
    assert verify_frozen() == list(MANIFEST)


@pytest.mark.parametrize("name", ["published/speedups.csv", "published/ablation.csv",
                                  "published/sampling.csv", "published/gpu_lookahead.csv",
                                  "published/model_shapes.csv", "gpus.csv"])
def test_reference_tables_have_sources(name):
    """Every published number or GPU figure names where it comes from."""
    rows = list(csv.DictReader((PROMPT_DIR.parent / name).open()))
    assert rows and all(row["source"].strip() for row in rows)


def test_gpu_table_covers_the_classes_we_model():
    rows = {row["gpu"]: row for row in csv.DictReader((PROMPT_DIR.parent / "gpus.csv").open())}
    for gpu in ("T4", "RTX 3090", "RTX 4090", "A10G", "L4", "A100 40GB SXM", "A100 80GB SXM", "H100 SXM", "H200 SXM"):
        assert float(rows[gpu]["fp16_tensor_tflops_dense"]) > 0 and float(rows[gpu]["memory_bandwidth_gbs"]) > 0
