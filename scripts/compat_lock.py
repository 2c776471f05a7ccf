"""Write requirements-compat.lock: the hash-pinned environment CI runs lade's compat checks in at the lowest
transformers pyproject allows (.ci/run): requirements.lock's pins of torch, pytest and everything they and
transformers need, with transformers pinned to LOWEST instead.

    python scripts/compat_lock.py

The closure is read from this environment's installed metadata (requirements.lock's); transformers LOWEST's hashes
are those of its wheel and source distribution as `pip download` fetches them from PyPI. Its requirements must fit
requirements.lock's versions of them (pip refuses the lock otherwise).
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import tempfile
from importlib.metadata import distribution
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
LOCK, COMPAT = REPO / "requirements.lock", REPO / "requirements-compat.lock"
LOWEST = "5.20.0"  # the lower end of pyproject's transformers range
ROOTS = ("torch", "transformers", "pytest", "scipy")  # scipy: the sampling slice's distribution tests
HEADER = f"""# The lowest transformers pyproject allows ({LOWEST}) with requirements.lock's torch, pytest, scipy and
# every other pin they need, each with the sha256 of its files (Linux x86_64, CPython 3.11, the CPU build of
# torch). CI runs lade's compat checks in a venv made from it (scripts/compat_ends.sh):
#   python -m pip install --require-hashes -r requirements-compat.lock
# (adding --extra-index-url https://download.pytorch.org/whl/cpu where no configured index has the CPU build of torch)
# Regenerate: python scripts/compat_lock.py

"""


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def blocks(path: Path) -> dict[str, str]:
    """{canonical name: its 'name==version \\ --hash=...' block} of a hash-pinned lock."""
    found, current = {}, []
    for line in path.read_text().splitlines():
        if re.match(r"^[A-Za-z0-9]", line):
            current = [line]
            found[canonical(line.split("==")[0])] = current
        elif line.startswith("    --hash") and current:
            current.append(line)
    return {name: "\n".join(lines) for name, lines in found.items()}


def closure(roots: tuple[str, ...]) -> list[str]:
    """The canonical names of the distributions `roots` need (requirements without extras, markers evaluated)."""
    seen, stack = set(), list(roots)
    while stack:
        name = canonical(stack.pop())
        if name in seen:
            continue
        seen.add(name)
        for line in distribution(name).requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                stack.append(requirement.name)
    return sorted(seen)


def transformers_block(version: str) -> str:
    """transformers==version with the sha256 of its wheel and source distribution."""
    digests = []
    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("--only-binary=:all:", "--no-binary=:all:"):
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", kind, "-d", tmp,
                            f"transformers=={version}"], check=True)
        for file in sorted(Path(tmp).iterdir()):
            digests.append(hashlib.sha256(file.read_bytes()).hexdigest())
    return " \\\n".join([f"transformers=={version}", *(f"    --hash=sha256:{d}" for d in digests)])


def main() -> None:
    pinned = blocks(LOCK)
    names = closure(ROOTS)
    missing = [name for name in names if name not in pinned]
    if missing:
        raise SystemExit(f"not pinned in requirements.lock: {missing}")
    lines = [transformers_block(LOWEST) if name == "transformers" else pinned[name] for name in names]
    COMPAT.write_text(HEADER + "\n".join(lines) + "\n")
    print(f"wrote {COMPAT.name}: {len(lines)} pins")


if __name__ == "__main__":
    main()
