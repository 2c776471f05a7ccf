"""The architecture sweep's fast slice (families with distinct attention, position and cache schemes): lade equals
plain generate or refuses before any forward, on each; and docs/architectures.md is the table generated from the
committed results file."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from lab.studies import architecture_sweep as sweep
from lab.studies.tiny_architectures import generative_types

SLICE = ("llama", "gpt2", "gpt_neo", "opt", "bloom", "mistral", "gemma2", "phi", "bart", "imagegpt", "kosmos-2.5",
         "llava")


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> pd.DataFrame:
    import os

    os.environ["LADE_CACHE"] = str(tmp_path_factory.mktemp("profiles"))  # "auto" profiles of the tiny models
    types = generative_types()
    return sweep.sweep({t: types[t] for t in SLICE})


def test_the_fast_slice_has_no_wrong_output_and_no_crash(rows):
    """Every case of every type of the slice is identical, a near-tie or refused before any forward."""
    bad = rows[rows.status.isin(sweep.PROBLEMS)]
    assert bad.empty, bad[["model_type", "case", "detail"]].to_string()


def test_the_slice_decodes_what_it_should_and_refuses_the_rest(rows):
    """Windows below reach are decoded (Mistral's 4096, GPT-Neo's 256); ALiBi, flattened masks and recomputed
    positions are refused; a composite model's "auto" profiles through its text config."""
    verdicts = {t: sweep.verdict(group)[0] for t, group in rows.groupby("model_type")}
    for model_type in ("llama", "gpt2", "gpt_neo", "opt", "mistral", "gemma2", "phi", "llava"):
        assert verdicts[model_type] == "supported", model_type
    for model_type in ("bloom", "bart", "imagegpt", "kosmos-2.5"):
        assert verdicts[model_type] == "refused", model_type


def test_a_difference_at_a_near_tie_is_not_wrong():
    """Classification: the first differing new token, and the top-2 gap that says whether fp32 rounding decides it."""
    expected, got = torch.tensor([[5, 6, 7, 8]]), torch.tensor([[5, 6, 7, 9]])
    assert sweep.first_difference(expected, got, start=2) == 1
    assert sweep.first_difference(expected, expected, start=2) is None
    assert sweep.top2_gap(torch.tensor([1.0, 3.0, 2.9995])) < sweep.NEAR_TIE


def test_the_docs_table_is_generated_from_the_results_file():
    assert sweep.DOC.read_text() == sweep.render_doc(sweep.RESULTS)


def test_a_type_that_cannot_be_compared_says_why():
    """A type plain generate cannot run says which input, package or bug stops it; a case plain generate refuses
    (beam search on some types) does not hide the verdict of the others."""
    rows = pd.DataFrame(dict(model_type="x", model_class="X", case=["plain generate"], status=["not buildable"],
                             detail=["needs extra inputs: pixel_values (an image) (ValueError: ...)"]))
    assert sweep.verdict(rows) == ("needs extra inputs", "pixel_values (an image) (ValueError: ...)")
    rows = pd.DataFrame(dict(model_type="x", model_class="X", case=list(sweep.CASES),
                             status=["identical"] * 4 + ["not buildable"], detail=[""] * 4 + ["plain refuses"]))
    assert sweep.verdict(rows) == ("supported", "")
