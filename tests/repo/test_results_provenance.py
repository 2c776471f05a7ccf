"""Every results file under data/results names what wrote it: a provenance sidecar (`<file>.provenance.json`) with the
command (argv), the git commit and the version of lade that ran, so `python -m lab.pipeline.cite FILE` can cite it.
No exception: a file that cannot be regenerated is retired from the tree (its experiment's INDEX.md gives the command
and the commit whose tree last holds it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "data" / "results"


def results_files() -> list[str]:
    """Every committed results file (the sidecars and INDEX.md aside; quick/ holds --quick runs, not committed)."""
    return sorted(str(p.relative_to(RESULTS)) for p in RESULTS.rglob("*") if p.is_file()
                  and not p.name.endswith(".provenance.json") and p.name != "INDEX.md"
                  and p.relative_to(RESULTS).parts[0] != "quick")


def missing(name: str) -> str | None:
    """What the provenance of results file `name` lacks, or None."""
    sidecar = RESULTS / f"{name}.provenance.json"
    if not sidecar.exists():
        return "a provenance sidecar (lab.harness.results.save_results writes one)"
    record = json.loads(sidecar.read_text())
    prov = record.get("provenance", record)
    lacks = [field for field, value in (("command", prov.get("command")), ("git_commit", prov.get("git_commit")),
                                        ("lade version", (prov.get("packages") or {}).get("lade"))) if not value]
    return ", ".join(lacks) or None


@pytest.mark.parametrize("name", results_files())
def test_results_file_records_command_commit_and_lade_version(name):
    lacks = missing(name)
    assert not lacks, f"{name} lacks {lacks}: regenerate it with lab.harness.results.save_results, or retire it"
