"""Every notebook times each prompt as the harness says (lab.harness.bench.repeats_for): REPEATS in a full run, the
fewer QUICK_REPEATS in a --quick run, still enough for the A/A row, and hands that count to its benchmark runner."""

from __future__ import annotations

import json

from lab.harness.bench import QUICK_REPEATS, REPEATS, repeats_for
from lab.harness.paths import REPO


def test_quick_runs_time_fewer_repeats_but_keep_the_aa_row():
    assert repeats_for(False) == REPEATS >= 3
    assert repeats_for(True) == QUICK_REPEATS >= 2  # the A/A row is greedy's first repeat against its second


def test_every_notebook_passes_its_repeats_to_its_runner():
    for path in sorted((REPO / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        assert "repeats = repeats_for(quick)" in code, path.name
        assert "repeats=repeats" in code, path.name
