"""Provenance record stored with every results file: the command that wrote it, versions (lade's included), the lock's
digest, git commit and cleanliness, device, time, parameters; and the digest of a model's weights (`weights_sha256`)."""

from __future__ import annotations

import datetime
import hashlib
import os
import platform
import shlex
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import torch

import lade
from lab.harness.paths import REPO
from lade.cpu_linear import packed_linear_count
from lade.device import device_description

# the name recorded -> its installed distribution (lade: the version of the code that ran, lade.__version__)
PACKAGES = {"torch": "torch", "transformers": "transformers", "datasets": "datasets", "numpy": "numpy"}


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


RUN_OUTPUTS = ("data/results", "figures")  # what the notebooks write: not a change to what produced a result


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def lock_file() -> str:
    """The lock this environment was installed from: requirements-gpu.lock for a CUDA build of torch, else
    requirements.lock (the CPU build)."""
    import torch

    return "requirements-gpu.lock" if torch.version.cuda else "requirements.lock"


def lock_digest(name: str | None = None) -> str | None:
    """sha256 of a lock file (default: lock_file()): names the exact environment a result came from."""
    lock = REPO / (name or lock_file())
    return hashlib.sha256(lock.read_bytes()).hexdigest() if lock.exists() else None


def commit_label(prov: dict) -> str:
    """A provenance record's commit as prose names it: the short hash, with " (dirty)" when the tree was dirty."""
    return (prov.get("git_commit") or "unknown")[:7] + (" (dirty)" if prov.get("git_dirty") else "")


def weights_sha256(model: torch.nn.Module) -> str:
    """sha256 over the model's state dict as it runs (names, dtypes, shapes and raw bytes, in name order): the
    same weights in the same dtype give the same digest wherever they were loaded from."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        tensor = tensor.detach().cpu().contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()


def model_record(model: torch.nn.Module) -> dict[str, Any]:
    """What a result file records of the model it ran: dtype, weights digest, linear layers packed for oneDNN."""
    return {"dtype": str(model.dtype), "weights_sha256": weights_sha256(model),
            "packed_linears": packed_linear_count(model)}


def command() -> tuple[str, str | None]:
    """(the command that is writing a results file, the notebook it runs or None): run_all.sh's command line and the
    notebook it executes (it exports LADE_COMMAND and LADE_NOTEBOOK), else this process's own argv as invoked, e.g.
    `python -m lab.studies.flat_steps --batch-sizes 2,4`."""
    if os.environ.get("LADE_COMMAND"):
        return os.environ["LADE_COMMAND"], os.environ.get("LADE_NOTEBOOK") or None
    return shlex.join(sys.orig_argv), None


def provenance(**params: Any) -> dict[str, Any]:
    """A JSON-serialisable record of the environment plus `params` (model, seed, config, ...). git_dirty: whether
    tracked files other than the runs' own outputs (RUN_OUTPUTS, which a default run rewrites as it goes) differ from
    the commit."""
    status = _git("status", "--porcelain", "--untracked-files=no", "--", ".", *(f":!{p}" for p in RUN_OUTPUTS))
    argv, notebook = command()
    return {
        "command": argv,
        "notebook": notebook,
        "timestamp": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": None if status is None else bool(status),
        "lock_file": lock_file(),
        "lock_sha256": lock_digest(),
        # lade.__version__, not the distribution's metadata, which an editable install leaves at the version installed
        "packages": {"lade": lade.__version__} | {name: _version(dist) for name, dist in PACKAGES.items()},
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "device": device_description(),
        "params": params,
    }
