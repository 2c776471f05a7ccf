"""Regenerate the hash-pinned environment files from the pins of requirements.lock (to change a version, edit its
pin there first). Needs PyPI and uv (`pip install uv`); Linux x86_64, CPython 3.11.

- requirements.lock: the CPU environment; every pin carries the sha256 of every file PyPI has for it, torch is the CPU
  build (2.13.0+cpu, download.pytorch.org/whl/cpu; its hash from the wheel pip fetches for it, or --torch-cpu-wheel).
- requirements-gpu.lock: the same pins with PyPI's CUDA build of torch and the CUDA runtime wheels it needs,
  resolved by uv for x86_64 Linux (every other version unchanged: uv fails if they no longer fit).
- requirements-flash-attn.lock: flash-attn (a source distribution, built against the installed CUDA torch) and einops.
- environment.yml: conda's Python (PYTHON, the exact release the results recorded) plus every pin of requirements.lock.

Usage: python scripts/lock.py [--torch-cpu-wheel PATH] [--uv PATH]
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOCK, GPU_LOCK, FLASH_LOCK, CONDA = (REPO / n for n in ("requirements.lock", "requirements-gpu.lock",
                                                        "requirements-flash-attn.lock", "environment.yml"))
CPU_INDEX = "--extra-index-url https://download.pytorch.org/whl/cpu"
PLATFORM = ["--python-version", "3.11.7", "--python-platform", "x86_64-manylinux_2_28"]
FLASH_ATTN = "flash-attn==2.8.3.post2"
# uv reads a source distribution's dependencies by building it; flash-attn's build needs torch and CUDA, so its
# metadata (setup.py install_requires) is given here instead
FLASH_METADATA = '[[dependency-metadata]]\nname = "flash-attn"\nversion = "2.8.3.post2"\nrequires-dist = ["torch", "einops"]\n'
CPU_HEADER = f"""# Exact pins for lade, each with the sha256 of its files (Python 3.11, Linux x86_64, the CPU build of torch):
#   python -m pip install --require-hashes -r requirements.lock && python -m pip install -e . --no-deps
# torch 2.13.0+cpu is served by download.pytorch.org: where pip does not already offer it, add
# `{CPU_INDEX}` (scripts/setup.sh does so when pip cannot find it).
# GPU: requirements-gpu.lock and requirements-flash-attn.lock (README, "GPU / CUDA torch"). environment.yml pins the
# same versions (tests/repo/test_environment.py). Regenerate: python scripts/lock.py (edit a pin here first to change it).
"""
GPU_HEADER = """# The GPU variant of requirements.lock: the same pins, with PyPI's CUDA build of torch and the CUDA runtime wheels it
# pulls, resolved by uv for Python 3.11 on Linux x86_64 (scripts/lock.py). Needs an NVIDIA driver for CUDA 13.
#   python -m pip install --require-hashes -r requirements-gpu.lock
#   python -m pip install --require-hashes --no-build-isolation -r requirements-flash-attn.lock   # optional: FA2
#   python -m pip install -e . --no-deps
"""
PYTHON = "3.11.7"  # the exact interpreter the results were produced with (their provenance records it)
CONDA_HEADER = """# Conda environment for lade: the exact Python the results were produced with (3.11.7, as their provenance records)
# and every pin of requirements.lock (tests/repo/test_environment.py checks both).
# Create: conda env create -f environment.yml, then in the repository: pip install -e . --no-deps
# The lock itself, hash-checked, is what scripts/setup.sh installs (./run_all.sh and ./run_tests.sh call it): a .venv
# from Python 3.11, then `pip install -r requirements.lock` (every pin carries its sha256, so pip checks each wheel;
# the CPU build of torch from https://download.pytorch.org/whl/cpu) and `pip install -e . --no-deps`. By hand:
#   python3.11 -m venv .venv && .venv/bin/pip install --require-hashes -r requirements.lock \\
#       --extra-index-url https://download.pytorch.org/whl/cpu && .venv/bin/pip install -e . --no-deps
# GPU: pip install --require-hashes -r requirements-gpu.lock instead (scripts/setup.sh: LADE_LOCK=requirements-gpu.lock).
"""
FLASH_HEADER = """# flash-attn for the GPU environment (install after requirements-gpu.lock): a source distribution built against the
# installed torch, so pip needs --no-build-isolation, nvcc (CUDA toolkit) and a few minutes:
#   python -m pip install --require-hashes --no-build-isolation -r requirements-flash-attn.lock
"""


def read_pins(path: Path) -> tuple[list[str], list[str]]:
    """(direct, transitive) 'name==version' lines of a lock, in order (hashes and options dropped)."""
    direct, transitive, block = [], [], None
    for line in path.read_text().splitlines():
        if line.startswith("# direct"):
            block = direct
        elif line.startswith("# transitive"):
            block = transitive
        elif block is not None and re.match(r"^[A-Za-z0-9_.\-]+==", line):
            block.append(line.split(" \\")[0].strip())
    return direct, transitive


def canonical(pin: str) -> str:
    return re.sub(r"[-_.]+", "-", pin.split("==")[0]).lower()


def uv_hashes(uv: str, pins: list[str], tmp: Path, no_deps: bool) -> dict[str, str]:
    """{canonical name: 'name==version \\\\\\n    --hash=...' block} from `uv pip compile --generate-hashes`."""
    source, out = tmp / "in.txt", tmp / "out.txt"
    source.write_text("\n".join(pins) + "\n")
    (tmp / "uv.toml").write_text(FLASH_METADATA)
    cmd = [uv, "pip", "compile", str(source), "--generate-hashes", "--no-annotate", "--no-header", *PLATFORM,
           "--index-url", "https://pypi.org/simple", "--config-file", str(tmp / "uv.toml"), "-o", str(out)]
    subprocess.run(cmd + (["--no-deps"] if no_deps else []), check=True)
    blocks = re.split(r"\n(?=\S)", out.read_text().strip())
    return {canonical(block): block for block in blocks}


def torch_cpu_block(pin: str, wheel: Path | None, tmp: Path) -> str:
    """The CPU torch pin with the sha256 of its Linux x86_64 CPython 3.11 wheel."""
    version = pin.split("==")[1].split("+")[0] + "+cpu"
    if wheel is None:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(tmp),
                        CPU_INDEX.replace(" ", "="), f"torch=={version}"], check=True)
        wheel = next(tmp.glob(f"torch-{version}-*.whl"))
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    return f"torch=={version} \\\n    --hash=sha256:{digest}"


def write_lock(path: Path, header: str, blocks: list[tuple[str, list[str]]]) -> None:
    text = header + "".join(f"\n# {title}\n" + "\n".join(lines) + "\n" for title, lines in blocks)
    path.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch-cpu-wheel", type=Path, default=None)
    parser.add_argument("--uv", default=shutil.which("uv") or "uv")
    args = parser.parse_args()
    direct, transitive = read_pins(LOCK)
    torch_pin = next(p for p in direct if canonical(p) == "torch")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        others = [p for p in direct + transitive if canonical(p) != "torch"]
        hashed = uv_hashes(args.uv, others, tmp, no_deps=True)
        hashed["torch"] = torch_cpu_block(torch_pin, args.torch_cpu_wheel, tmp)
        write_lock(LOCK, CPU_HEADER, [
            ("direct", [hashed[canonical(p)] for p in direct]),
            ("transitive (pip freeze of a fresh venv with the direct pins, plus setuptools which freeze omits)",
             [hashed[canonical(p)] for p in transitive])])
        base = torch_pin.split("+")[0]  # torch==2.13.0: PyPI's (CUDA) build
        gpu = uv_hashes(args.uv, others + [base, FLASH_ATTN], tmp, no_deps=False)
        flash = [gpu.pop(name) for name in ("flash-attn", "einops")]
        cpu_names = {canonical(p) for p in direct + transitive}
        write_lock(GPU_LOCK, GPU_HEADER, [
            ("as requirements.lock, torch the CUDA build", [gpu[canonical(p)] for p in direct + transitive]),
            ("CUDA runtime of torch", [block for name, block in gpu.items() if name not in cpu_names])])
        write_lock(FLASH_LOCK, FLASH_HEADER, [("flash attention 2", flash)])
    conda = [*CONDA_HEADER.splitlines(), "name: lade", "channels:", "  - conda-forge", "dependencies:",
             f"  - python={PYTHON}", "  - pip", "  - pip:",
             f"      - {CPU_INDEX}"]
    conda += [f"      - {hashed[canonical(p)].split(' ')[0]}" for p in direct + transitive]
    CONDA.write_text("\n".join(conda) + "\n")
    print(f"wrote {LOCK.name}, {GPU_LOCK.name}, {FLASH_LOCK.name}, {CONDA.name}")


if __name__ == "__main__":
    main()
