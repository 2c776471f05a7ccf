"""The notebooks' Findings are computed from their results files: the verdict follows the interval (and refuses to
conclude below 5 prompts), every notebook ends by displaying its Findings, and each Findings function runs on the
committed results."""

import json
from pathlib import Path

import pytest

from lab.studies import findings

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "data" / "results"


def test_verdict_follows_the_interval():
    """An interval above 1 is a speedup, below 1 a slowdown, one covering 1 says nothing either way; with fewer
    than 5 prompts a bootstrap interval is meaningless, so the single prompts are listed and no conclusion drawn."""
    assert findings.verdict(1.3, 1.1, 1.5, 10).endswith("faster than greedy")
    assert findings.verdict(0.8, 0.7, 0.9, 10).endswith("slower than greedy")
    assert "inconclusive" in findings.verdict(1.05, 0.95, 1.2, 10)
    few = findings.verdict(1.4, float("nan"), float("nan"), 3, raw=[1.2, 1.4, 1.6])
    assert "1.20, 1.40, 1.60" in few and "no conclusion" in few and "[" not in few


@pytest.mark.parametrize("name,call", [
    ("mt_bench", lambda: findings.speedups(RESULTS / "mt_bench.jsonl")),
    ("scaling", lambda: findings.scaling(RESULTS / "scaling.jsonl")),
    ("cost_model", lambda: findings.cost_model(RESULTS / "calibration.csv", RESULTS / "cpu_validation.csv")),
    ("sampling", lambda: findings.sampling(RESULTS / "sampling.jsonl", RESULTS / "sampling_distribution.csv")),
    ("ablation", lambda: findings.ablation(RESULTS / "ablation.jsonl")),
    ("spec_bench", lambda: findings.spec_bench(RESULTS / "spec_bench.jsonl")),
])
def test_findings_render_from_the_committed_results(name, call):
    """Each Findings names its results file and commit and gives every claim its n."""
    text = call()
    assert text.startswith("## Findings") and "commit " in text
    claims = [line for line in text.splitlines() if line.startswith("- ")]
    assert claims and all("n=" in line for line in claims), text


def test_every_notebook_ends_with_its_findings():
    """The last cell of every notebook displays the Findings its study module computes (`findings`, from
    lab.studies.findings), so no number in the notebook's conclusions is typed by hand."""
    for path in sorted((REPO / "notebooks").glob("*.ipynb")):
        last = json.loads(path.read_text())["cells"][-1]
        source = "".join(last["source"])
        assert last["cell_type"] == "code" and "Markdown(" in source and "st.findings(" in source, path.name
