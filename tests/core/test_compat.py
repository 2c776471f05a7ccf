"""lade against another transformers release. CI checks both ends of pyproject's range (scripts/compat_ends.sh, the
lowest from the hash-pinned requirements-compat.lock); this test tries any release, e.g. one to widen the range to.

Skipped unless LADE_COMPAT_VENV_TEST=1: it builds a scratch venv (torch at this environment's version, transformers
at each release in LADE_COMPAT_TRANSFORMERS, default the lower end of the supported range) and runs
tests/compat_check.py there, which fails unless lade's greedy output equals plain generate's through every
private transformers API lade.compat touches. pip needs PyPI (or a local index) for transformers and its
dependencies; it takes a few minutes.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
LOWEST = "5.20.0"  # the lower end of pyproject's transformers range
VERSIONS = os.environ.get("LADE_COMPAT_TRANSFORMERS", LOWEST).split(",")

pytestmark = pytest.mark.skipif(os.environ.get("LADE_COMPAT_VENV_TEST") != "1",
                                reason="installs transformers into a scratch venv: set LADE_COMPAT_VENV_TEST=1")


@pytest.mark.parametrize("version", VERSIONS)
def test_lade_equals_plain_generate_under_another_transformers(version, tmp_path):
    """compat_check.py asserts lade == plain generate on each path; passing here means the private APIs lade.compat
    reads behave the same in that release."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    torch_version = torch.__version__.split("+")[0]
    subprocess.run([python, "-m", "pip", "install", "-q", f"torch=={torch_version}", f"transformers=={version}"],
                   check=True, timeout=1800)
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}", "HF_HUB_OFFLINE": "1"}
    run = subprocess.run([python, str(ROOT / "tests" / "compat_check.py")], env=env, capture_output=True, text=True,
                         timeout=900)
    assert run.returncode == 0 and "compat ok" in run.stdout, run.stdout[-3000:] + run.stderr[-3000:]
    assert f"transformers {version}," in run.stdout
