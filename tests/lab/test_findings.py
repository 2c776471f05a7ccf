"""The notebooks' Findings are computed from their results files: the verdict follows the interval (and refuses to
conclude below 5 prompts), every notebook opens with its Findings and claims table, and each Findings function runs
on the committed results."""

import json
import re
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
    ("cost_model", lambda: findings.cost_model(RESULTS / "calibration.csv", RESULTS / "cpu_validation.csv",
                                               RESULTS / "gpu_predictions.csv")),
    ("sampling", lambda: findings.sampling(RESULTS / "sampling.jsonl", RESULTS / "sampling_distribution.csv")),
    ("ablation", lambda: findings.ablation(RESULTS / "ablation.jsonl")),
    ("spec_bench", lambda: findings.spec_bench(RESULTS / "spec_bench.jsonl")),
])
def test_findings_render_from_the_committed_results(name, call):
    """Each Findings names its results file and commit and gives every claim its n."""
    text = call()
    assert text.startswith("## Findings\n\n| claim | evidence | status |") and "commit " in text
    claims = [line for line in text.splitlines() if line.startswith("- ")]
    assert claims and all("n=" in line for line in claims), text


def test_every_notebook_opens_with_its_findings_and_claims():
    """Findings first: a notebook opens with its title, its parameters, the cells that run or load its results (no
    figure, no prose), then the cell that displays the Findings its study module computes (claims table included),
    then the method; where the notebook carries outputs, the first Markdown it shows is those Findings."""
    for path in sorted((REPO / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text())["cells"]
        assert cells[0]["cell_type"] == "markdown" and "".join(cells[0]["source"]).startswith("# "), path.name
        shows = [i for i, c in enumerate(cells) if c["cell_type"] == "code" and "Markdown(" in "".join(c["source"])]
        assert len(shows) == 1, f"{path.name}: one cell displays the findings"
        first = shows[0]
        assert "st.findings(" in "".join(cells[first]["source"]), path.name
        assert all(c["cell_type"] == "code" for c in cells[1:first]), f"{path.name}: prose before the findings"
        assert not any(re.search(r"^fig = ", "".join(c["source"]), re.M) for c in cells[1:first]), path.name
        assert cells[first + 1]["cell_type"] == "markdown", f"{path.name}: the method follows the findings"
        markdown = [(i, o) for i, c in enumerate(cells) for o in c.get("outputs", [])
                    if "text/markdown" in o.get("data", {})]
        if markdown:
            index, output = markdown[0]
            assert index == first and "".join(output["data"]["text/markdown"]).startswith("## Findings"), path.name


def test_claims_say_what_the_evidence_carries():
    """The claims table: a scaling slope over fewer than 5 prompts claims no law; beam search's gain is split into the
    beam loop's (lade's loop without drafts) and drafting's; GPU-class numbers are modelled, with the model's
    leave-one-out error."""
    from lab.harness.claims import MODELLED
    from lab.studies import findings_claims as fc

    slopes = fc.scaling(RESULTS / "scaling.jsonl", [(3, 0.1, 0.05, 0.2, 4), (5, 0.1, 0.05, 0.2, 6)])
    assert "no conclusion" in slopes[0].claim and "scaling law" not in slopes[0].claim
    assert "scaling law" in slopes[1].claim
    beam = findings.spec_bench(RESULTS / "spec_bench_beam.jsonl")
    assert "drafting alone" in beam and "the beam loop alone" in beam
    gpu = fc.cost_model(RESULTS / "calibration.csv", RESULTS / "cpu_validation.csv", RESULTS / "gpu_predictions.csv")
    predicted = [c for c in gpu if c.claim.startswith("prediction")]
    assert predicted and all(c.status == MODELLED and "leave-one-out" in c.qualifier for c in predicted)
