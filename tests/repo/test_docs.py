"""The docs cannot name files that are not there: every repository path that README.md and docs/*.md mention in
backticks, and every file of the annotated trees in docs/architecture.md, resolves in the checkout."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
TOP = {p.name for p in REPO.iterdir() if not p.name.startswith(".") or p.name == ".ci"} - {"build"}
SUFFIXES = (".py", ".sh", ".md", ".csv", ".json", ".jsonl", ".yaml", ".yml", ".toml", ".lock", ".ipynb", ".cff", ".txt")
GENERATED = ("build/", "figures/quick/", "data/results/quick/", ".venv/", ".cache/")  # written by runs, not committed


def exists(path: str, base: Path = REPO) -> bool:
    """`path` (a glob where it has `*`, `{a,b}` alternatives expanded) names something under `base`."""
    alternatives = re.match(r"(.*)\{([^}]*)\}(.*)", path)
    if alternatives:
        head, options, tail = alternatives.groups()
        return all(exists(head + option + tail, base) for option in options.split(","))
    path = path.rstrip("/")
    return any(base.glob(path)) if "*" in path else (base / path).exists()


def mentioned_paths(text: str) -> set[str]:
    """Backticked tokens that read as repository paths: they start at a top-level entry of the checkout and either
    hold a slash or end in a file suffix."""
    found = set()
    for token in re.findall(r"`([^`\s]+)`", text):
        token = token.split(":")[0].rstrip(".,;)")
        if token.split("/")[0] in TOP and ("/" in token or token.endswith(SUFFIXES)) \
                and not token.startswith(GENERATED):
            found.add(token)
    return found


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_mentioned_path_exists(doc):
    missing = sorted(p for p in mentioned_paths(doc.read_text()) if not exists(p))
    assert not missing, f"{doc.name} names paths the checkout lacks: {missing}"


def tree_entries(block: str) -> list[str]:
    """The paths an annotated tree lists: each line's names (before a gap of two spaces) sit in the directory of the
    nearest less-indented line that names a directory (`name/`); lines indented 16 or more continue a description."""
    entries, stack = [], []  # stack: (indent, directory) of the enclosing directories
    for line in block.splitlines():
        indent = len(line) - len(line.lstrip())
        if not line.strip() or indent >= 16:
            continue
        names = re.split(r"\s{2,}", line.strip())[0].split()
        names = names[:1] if indent == 0 else [n for n in names if re.fullmatch(r"[\w.*/{},+-]+", n)]
        while stack and stack[-1][0] >= indent:
            stack.pop()
        base = stack[-1][1] if stack else ""
        entries += [base + name for name in names]
        if names and names[0].endswith("/"):
            stack.append((indent, base + names[0]))
    return [e for e in entries if not e.startswith(GENERATED)]


def test_architecture_trees_match_the_checkout():
    """The annotated file trees in docs/architecture.md (the code blocks that list files) name only what exists."""
    text = (REPO / "docs" / "architecture.md").read_text()
    blocks = [b for b in re.findall(r"```\n(.*?)```", text, re.S) if re.search(r"^\S+/\s", b, re.M)]
    assert blocks
    missing = sorted(e for b in blocks for e in tree_entries(b) if not exists(e))
    assert not missing, f"docs/architecture.md lists files the checkout lacks: {missing}"
