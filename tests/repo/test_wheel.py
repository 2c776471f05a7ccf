"""The wheel (`pip wheel .`) holds the decoder only: the package `lade`, nothing of the repository's research wing
(lab/), and no module in it imports more than torch, transformers (with numpy, which transformers requires) and the
standard library when imported."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LAB_ONLY = {"lab", "datasets", "pandas", "matplotlib", "seaborn", "scipy", "gguf", "yaml", "tqdm", "papermill"}
IMPORTABLE = {"lade", "torch", "transformers", "numpy"}  # numpy: a requirement of transformers itself


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """`pip wheel . --no-deps` of a copy of the package sources and the lab beside them (a copy: setuptools would
    reuse a checkout's stale build/ folder)."""
    source, out = tmp_path_factory.mktemp("source"), tmp_path_factory.mktemp("wheel")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, source / name)
    for name in ("lade", "lab"):
        shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "--no-build-isolation",
                    "--no-index", "-q", "-w", str(out)], check=True, capture_output=True, cwd=out)
    (path,) = out.glob("lade_decoding-*.whl")
    return path


def test_wheel_holds_only_the_lade_package(wheel):
    """Every file of the wheel is under lade/ or its metadata folder: the lab, tests, scripts, notebooks and data
    are used from a checkout and must not ship (the lab reads the repository's data/ and would not work installed)."""
    names = zipfile.ZipFile(wheel).namelist()
    outside = [n for n in names if not n.startswith(("lade/", "lade_decoding-"))]
    assert not outside, outside
    assert "lade/__init__.py" in names and "lade/config.py" in names


def module_imports(source: str) -> tuple[set[str], set[str]]:
    """(top-level names imported when the module is imported, top-level names imported anywhere); relative
    imports are the package itself."""
    tree = ast.parse(source)
    eager = set()
    for node in tree.body:  # module body only: imports inside functions run on use, not on `import lade`
        for inner in ast.walk(node) if isinstance(node, (ast.If, ast.Try)) else [node]:
            eager |= _names(inner)
    return eager, set().union(*(_names(node) for node in ast.walk(tree)))


def _names(node: ast.AST) -> set[str]:
    if isinstance(node, ast.Import):
        return {alias.name.split(".")[0] for alias in node.names}
    if isinstance(node, ast.ImportFrom):
        return {"lade"} if node.level else {(node.module or "").split(".")[0]}
    return set()


def test_wheel_modules_import_only_torch_and_transformers(wheel):
    """A static scan of every module in the wheel: at import time only the standard library, torch, transformers
    (numpy) and lade itself; nowhere the lab or its packages (pandas, matplotlib, ...), which `pip install lade`
    does not bring."""
    archive = zipfile.ZipFile(wheel)
    eager_extra, lab_uses = {}, {}
    for name in archive.namelist():
        if not name.endswith(".py"):
            continue
        eager, anywhere = module_imports(archive.read(name).decode())
        if extra := eager - IMPORTABLE - set(sys.stdlib_module_names) - {"__future__"}:
            eager_extra[name] = sorted(extra)
        if used := anywhere & LAB_ONLY:
            lab_uses[name] = sorted(used)
    assert not eager_extra and not lab_uses, (eager_extra, lab_uses)
