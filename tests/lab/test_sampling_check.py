"""lab.studies.sampling_check: the joint losslessness test passes lade and a plain control, rejects a deliberately
biased verifier at a stated sample size, fixes its bins from the pilot alone, holds its stated false-rejection rate,
and its CLI writes the rows with provenance."""

import json

import matplotlib.pyplot as plt
import numpy as np
import pytest

from distribution import BiasedStrategy
from lab.harness.results import load_results
from lab.studies import sampling_check as sc
from tiny_models import char_tokenizer, drafts_often_accepted, tiny_model

POWER_N = 2000  # continuations per sampler at which the biased verifier must be rejected (5 of 5 seeded replicates
TOKENS = 4  # were when this test was written; 5 of 10 at n = 800)


@pytest.fixture(scope="module")
def samples():
    """distribution.drafts_often_accepted's model and prompt, checked at T = 0.7 with one biased replicate."""
    model, ids = drafts_often_accepted(12)
    setting = sc.Setting("tiny, T=0.7", tuple(ids[0].tolist()), 0.7)
    return sc.sample_check(model, None, sc.Size(POWER_N, TOKENS, 1, 250), (setting,), config="3,3,4",
                           biased=BiasedStrategy, auto=False, progress=False)


def test_correct_samplers_pass_and_the_biased_verifier_is_rejected(samples):
    """lade (whose steps accept several drafts) and the plain control fit plain sampling's joint law and marginals at
    the check's levels; the biased verifier (tests/distribution.py) is rejected at n = POWER_N, by the joint test and
    by the marginals."""
    joint = sc.joint_tests(samples)
    assert set(joint["sampler"]) == {sc.CONTROL, "lade"}
    assert not joint["reject"].any(), joint
    assert joint["bins"].min() >= 5
    lade_rows = samples[samples["sampler"] == "lade"]
    assert sc.compression(lade_rows) > 1.15, "drafts were rarely accepted: the check would test little"
    power = sc.power(samples)
    assert power[["test", "n", "replicates", "rejections"]].values.tolist() == [["joint", POWER_N, 1, 1],
                                                                                 ["marginal", POWER_N, 1, 1]]
    assert not sc.marginal_tests(samples)["reject"].any()
    assert sum("rejected 1 of 1" in line for line in sc.findings(samples)) == 2


def test_bins_are_fixed_by_the_pilot_alone(samples):
    """Rewriting every lade sample changes its test, never the bins (which come from the pilot's counts only)."""
    assert sc.pilot_bins(["a", "a", "b", "a", "b", "c"], 2) == {"a": 0, "b": 1}
    assert sc.bin_counts(["b", "z", "a", "c"], {"a": 0, "b": 1}).tolist() == [1, 1, 2]
    rewritten = samples.copy()
    rewritten.loc[rewritten["sampler"] == "lade", "tokens"] = " ".join(["0"] * TOKENS)
    before, after = sc.joint_tests(samples), sc.joint_tests(rewritten)
    pilot = samples.loc[samples["sampler"] == sc.PILOT, "tokens"].tolist()
    assert (before["bins"] == len(sc.pilot_bins(pilot)) + 1).all() and before["bins"].equals(after["bins"])
    assert after.set_index("sampler").loc["lade", "reject"]


def test_g_test_holds_its_level_for_samples_of_one_law():
    """Pairs of samples of n = 300 from one law with pooled rare bins: the G-test rejects at level 0.01 about 1% of
    the time (at most 2.5% over 2,000 pairs), so a correct sampler passes at the stated rate."""
    rng = np.random.default_rng(0)
    law = np.r_[0.3, 0.2, 0.1, 0.05 * np.ones(4), 0.002 * np.ones(100)]
    law /= law.sum()
    bins = sc.pilot_bins([str(o) for o in rng.choice(len(law), 300, p=law)])
    rejections = 0
    for _ in range(2000):
        a, b = (sc.bin_counts([str(o) for o in rng.choice(len(law), 300, p=law)], bins) for _ in range(2))
        rejections += sc.g_test(a, b)[2] < 0.01
    assert rejections / 2000 < 0.025


def test_figure_shows_both_views(samples):
    fig = sc.check_plot(samples, "check")
    assert len(fig.axes) == 2 and f"n = {POWER_N}" in fig._suptitle.get_text()
    plt.close(fig)


def test_cli_writes_rows_with_provenance(tmp_path, monkeypatch):
    """The quick size end to end on a tiny model saved as a local folder (lade auto times it into its own cache)."""
    folder = tmp_path / "tiny"
    tiny_model("llama", "sdpa").save_pretrained(folder)
    char_tokenizer().save_pretrained(folder)
    monkeypatch.setenv("LADE_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "check.jsonl"
    sc.main(["--out", str(out), "--model", str(folder), "--size", "quick", "--no-biased", "--threads", "1"])
    rows = load_results(out)
    assert list(rows.columns) == list(sc.SAMPLE_COLUMNS)
    assert set(rows["sampler"]) == {sc.PILOT, sc.REFERENCE, sc.CONTROL, "lade", "lade auto"}
    assert len(sc.joint_tests(rows)) == 3 and len(sc.findings(rows)) == 4  # the tests, recomputed from the file
    record = json.loads((tmp_path / "check.jsonl.provenance.json").read_text())["provenance"]
    assert "git_commit" in record and record["params"]["size"] == {**vars(sc.SIZES["quick"])}
