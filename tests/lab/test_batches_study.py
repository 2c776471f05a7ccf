"""Notebook 09 draws one throughput figure per compared method: its A/A row (greedy against itself, the noise floor)
is not one, nor is the reference."""

from __future__ import annotations

import pandas as pd

from lab.harness.stats import aa_name
from lab.studies.batches import REFERENCE, compared_methods


def test_compared_methods_leave_out_the_reference_and_the_aa_row():
    rows = pd.DataFrame({"method": [REFERENCE, "lade-auto", aa_name(REFERENCE), "lade(4,5,5)", "lade-auto"]})
    assert compared_methods(rows) == ["lade-auto", "lade(4,5,5)"]
