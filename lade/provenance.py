"""Provenance record stored with every results file: versions, git commit, device, time, parameters."""

from __future__ import annotations

import datetime
import platform
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import torch

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("lade", "torch", "transformers", "datasets", "numpy")


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_description() -> str:
    """e.g. "NVIDIA H100 80GB HBM3 (CUDA 12.8)" or "Intel(R) Xeon(R) ... (2 threads)"."""
    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(0)} (CUDA {torch.version.cuda}, {torch.cuda.device_count()} GPU)"
    return f"{_cpu_name()} ({torch.get_num_threads()} threads)"


def provenance(**params: Any) -> dict[str, Any]:
    """A JSON-serialisable record of the environment plus `params` (model, seed, config, ...)."""
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": None if status is None else bool(status),
        "packages": {name: _version(name) for name in PACKAGES},
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "device": device_description(),
        "params": params,
    }
