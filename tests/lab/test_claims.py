"""lab.harness.claims: a claim's status is one of four, a modelled claim carries its validation error and a published
one whether it was verified; evidence shows an interval only from 5 points on, else the points."""

import pytest

from lab.harness.claims import MEASURED, MODELLED, PUBLISHED, UNTESTED, Claim, evidence, table, verdict


def test_a_claim_states_how_far_its_evidence_goes():
    with pytest.raises(ValueError, match="status"):
        Claim("x", "y", "likely")
    with pytest.raises(ValueError, match="validation error"):
        Claim("pays on T4", "`gpu_predictions.csv`", MODELLED)
    with pytest.raises(ValueError, match="verified"):
        Claim("paper: 1.8x", "`data/published/ablation.csv`", PUBLISHED)
    rows = table([Claim("a | b", "`f.jsonl`, n = 6", MEASURED), Claim("kernel", "none", UNTESTED, "no GPU")])
    lines = rows.splitlines()
    assert lines[0] == "| claim | evidence | status |" and len(lines) == 4
    assert lines[2] == "| a / b | `f.jsonl`, n = 6 | *measured here* |"
    assert lines[3].endswith("| *untested* (no GPU) |")


def test_evidence_gives_an_interval_only_from_five_points():
    assert evidence("f.jsonl", 6, 1.2, 1.1, 1.3) == "`f.jsonl`, n = 6 prompts, 1.20x [1.10, 1.30]"
    few = evidence("f.jsonl", 3, 1.2, 1.0, 1.4, points=[1.1, 1.2, 1.3], unit="batches")
    assert "[" not in few and "points: 1.10, 1.20, 1.30" in few and "3 batches" in few
    assert verdict(1.2, 1.1, 1.3, 6, "faster", "slower") == "faster"
    assert verdict(0.8, 0.7, 0.9, 6, "faster", "slower") == "slower"
    assert verdict(1.2, 0.9, 1.3, 6, "faster", "slower").startswith("no difference shown")
    assert verdict(1.2, 1.1, 1.3, 4, "faster", "slower").startswith("no conclusion")
