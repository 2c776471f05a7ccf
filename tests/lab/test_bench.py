"""The benchmark runner: results schema, exactness flags, summary, files and the CLI on a tiny model."""

import json

import pandas as pd
import pytest
import torch

import lade
from lab.harness.bench import ROW_COLUMNS, main, run_benchmark, summarize
from lab.harness.methods import Method, parse_config
from lab.harness.models import load_model
from lab.harness.results import load_results, save_results
from lab.harness.runs import headline_for
from tiny_hub import save_tiny_chat_model


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return save_tiny_chat_model(tmp_path_factory.mktemp("tiny_chat"))


@pytest.fixture(scope="module")
def results(tiny_dir):
    torch.set_num_threads(1)
    model, tok = load_model(str(tiny_dir))
    methods = [Method.lade(3, 2, 2), Method.prompt_lookup(4)]
    return run_benchmark(model, tok, ("mt_bench", "humaneval"), methods, max_new_tokens=12, n_prompts=2,
                         ignore_eos=True, progress=False)  # REPEATS (3) timings of each


def test_schema_and_values(results):
    """One row per (prompt, method) with the documented columns; greedy is added as the reference, every
    method reproduces greedy exactly, and the derived columns are consistent with the raw ones."""
    df = results
    assert list(df.columns) == list(ROW_COLUMNS)
    assert len(df) == 2 * 2 * 4
    assert set(df["method"]) == {"greedy", "lade(3,2,2)", "pld(4)", "greedy (A/A)"}
    assert (df["new_tokens"] == 12).all()  # ignore_eos: exactly max_new_tokens
    assert df["matches_greedy"].all()
    greedy = df[df["method"] == "greedy"]
    assert (greedy["compression"] == 1.0).all() and (greedy["speedup"] == 1.0).all()
    assert (greedy["forward_calls"] == 12).all() and (greedy["step_tokens"] == 1.0).all()
    assert (greedy["single_token_steps"] == 1.0).all()
    lade_rows = df[df["method"] == "lade(3,2,2)"]
    assert (lade_rows["config"] == "3,2,2").all()
    assert (lade_rows["step_tokens"] > 1).all()  # the window alone feeds 1 + W(N-1) = 5 tokens
    assert (lade_rows["single_token_steps"] == 0).all()
    assert ((df["compression"] - df["new_tokens"] / df["forward_calls"]).abs() < 1e-12).all()
    assert ((df["forward_s"] <= df["wall_s"]) & (df["host_share"] >= 0) & (df["host_share"] < 1)).all()
    assert {"git_commit", "packages", "device", "params"} <= set(df.attrs["provenance"])


def test_headline_methods_run_more_prompts_paired_with_greedy(tiny_dir):
    """headline methods (and greedy) run up to headline_prompts per set, the others the first n_prompts; each
    speedup pairs a method with greedy on the prompts it ran. Bad headline settings are refused before any work."""
    model, tok = load_model(str(tiny_dir))
    methods = [Method.lade(3, 2, 2), Method.prompt_lookup(4)]
    df = run_benchmark(model, tok, ("mt_bench", "humaneval"), methods, max_new_tokens=8, n_prompts=1,
                       ignore_eos=True, progress=False, repeats=1, headline=["lade(3,2,2)"],
                       headline_prompts={"mt_bench": 3, "humaneval": 2})
    ran = df.groupby(["prompt_set", "method"]).size().to_dict()
    assert ran == {("mt_bench", "greedy"): 3, ("mt_bench", "lade(3,2,2)"): 3, ("mt_bench", "pld(4)"): 1,
                   ("humaneval", "greedy"): 2, ("humaneval", "lade(3,2,2)"): 2, ("humaneval", "pld(4)"): 1}
    summary = summarize(df).set_index(["prompt_set", "method"])
    assert summary.loc[("mt_bench", "pld(4)"), "prompts"] == 1 and summary.loc[("mt_bench", "lade(3,2,2)"),
                                                                                  "prompts"] == 3
    first = df[df["prompt_id"] == df[df["method"] == "pld(4)"]["prompt_id"].iloc[0]]
    pld = first[(first["method"] == "pld(4)") & (first["prompt_set"] == "mt_bench")]["wall_s"].sum()
    greedy = first[(first["method"] == "greedy") & (first["prompt_set"] == "mt_bench")]["wall_s"].sum()
    assert summary.loc[("mt_bench", "pld(4)"), "speedup"] == pytest.approx(greedy / pld)
    assert df.attrs["provenance"]["params"]["headline"] == ["lade(3,2,2)"]
    for bad, message in [(dict(headline=["lade-auto"]), "not among the methods"),
                         (dict(headline_prompts=3), "give both"), (dict(headline=["pld(4)"]), "give both"),
                         (dict(headline=["pld(4)"], headline_prompts=0), "at least n_prompts"),
                         (dict(headline=["pld(4)"], headline_prompts={"mt_bench": 3}), "no count for the sets")]:
        with pytest.raises(ValueError, match=message):
            run_benchmark(model, tok, ("mt_bench", "humaneval"), methods, n_prompts=1, progress=False, **bad)


def test_summary_totals_and_intervals(results):
    """summarize: one row per (set, method); speedup is the ratio of total times against greedy on the same
    prompts, compression the token-weighted new tokens per forward, each inside its 95% bootstrap interval."""
    summary = summarize(results)
    assert len(summary) == 8  # 2 sets x (greedy, lade, pld, greedy's A/A)
    row = summary[(summary["prompt_set"] == "humaneval") & (summary["method"] == "pld(4)")].iloc[0]
    ours = results[(results["prompt_set"] == "humaneval") & (results["method"] == "pld(4)")]
    greedy = results[(results["prompt_set"] == "humaneval") & (results["method"] == "greedy")]
    assert row["speedup"] == pytest.approx(greedy["wall_s"].sum() / ours["wall_s"].sum())  # same tokens
    assert row["compression"] == pytest.approx(ours["new_tokens"].sum() / ours["forward_calls"].sum())
    assert pd.isna(row["speedup_low"]) and pd.isna(row["compression_high"])  # 2 prompts: no interval, the points
    assert row["matches_greedy"] == 1.0 and row["prompts"] == 2
    reference = summary[summary["method"] == "greedy"]
    assert (reference["speedup"] == 1.0).all()


@pytest.mark.parametrize("suffix", [".jsonl", ".csv"])
def test_save_and_load_round_trip(results, tmp_path, suffix):
    path = save_results(results, tmp_path / f"bench{suffix}")
    back = load_results(path)
    pd.testing.assert_frame_equal(back, results, check_exact=False, rtol=1e-9)
    assert back.attrs["provenance"]["params"]["max_new_tokens"] == 12
    digest = results.attrs["provenance"]["params"]["weights_sha256"]
    assert len(digest) == 64 and back.attrs["provenance"]["params"]["weights_sha256"] == digest
    saved = pd.DataFrame(back.attrs["summary"])  # the intervals are written with the rows
    assert list(saved["method"]) == list(summarize(results)["method"]) and "speedup_high" in saved
    with pytest.raises(ValueError, match=r"\.jsonl or \.csv"):
        save_results(results, tmp_path / "bench.txt")


def test_method_parsing():
    assert Method.parse("greedy") == Method.greedy()
    assert Method.parse("pld:7").generate_kwargs == {"prompt_lookup_num_tokens": 7}
    assert Method.parse("lade:4,5,6").lookahead.guess_set_size == 6
    assert Method.parse("auto").lookahead == "auto:mixed" and Method.parse("auto:code").name == "lade-auto(code)"
    assert parse_config("5,7,7") == (5, 7, 7) and parse_config("8,0,2,16,2") == (8, 0, 2, 16, 2)
    pool_only = Method.parse("lade:8,0,2,16,2")
    assert pool_only.lookahead == lade.LookaheadConfig(window_size=0, ngram_size=8, guess_set_size=2, pool_capacity=16,
                                                       pool_match_tokens=2)
    assert pool_only.config_label() == "8,0,2,16,2" and Method.parse("lade:4,5,6").config_label() == "4,5,6"
    for bad in ("4,5", "a,b,c", "4,5,5,5"):
        with pytest.raises(ValueError, match="N,W,G"):
            parse_config(bad)
    with pytest.raises(ValueError, match="unknown method"):
        Method.parse("beam")


def test_cli_on_tiny_model(tiny_dir, tmp_path, capsys):
    """`python -m lab.harness.bench --model <folder>` runs end to end and writes rows plus provenance."""
    out = tmp_path / "cli.jsonl"
    main(["--model", str(tiny_dir), "--sets", "humaneval", "--n", "1", "--max-new-tokens", "8", "--methods",
          "greedy,pld:3", "--config", "2,2,1", "--threads", "1", "--out", str(out)])
    printed = capsys.readouterr().out
    assert "speedup_low" in printed and "lade(2,2,1)" in printed
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["method"] for r in rows] == ["greedy", "pld(3)", "lade(2,2,1)", "greedy (A/A)"]
    assert json.loads(out.with_name("cli.jsonl.provenance.json").read_text())["provenance"]["params"]["threads"] == 1


def test_cli_runs_beam_search(tiny_dir, tmp_path):
    out = tmp_path / "beams.jsonl"
    main(["--model", str(tiny_dir), "--sets", "mt_bench", "--n", "1", "--max-new-tokens", "6", "--methods",
          "greedy,lade:plain", "--num-beams", "2", "--threads", "1", "--repeats", "1", "--out", str(out)])
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["method"] for r in rows] == ["beam(2)", "lade(plain)"] and all(r["matches_greedy"] for r in rows)
    provenance = json.loads(out.with_name("beams.jsonl.provenance.json").read_text())["provenance"]
    assert provenance["params"]["num_beams"] == 2


def test_headline_for_a_notebook_is_lade_auto_on_at_least_every_methods_prompts():
    assert headline_for(["auto", "pld"], 3, 5) == (["lade-auto"], 5)
    assert headline_for(["auto"], 80, 5) == (["lade-auto"], 80)  # a spec's larger n_prompts wins
    assert headline_for(["auto"], {"humaneval": 5, "gsm8k": 200}, {"humaneval": 45}) == (
        ["lade-auto"], {"humaneval": 45, "gsm8k": 200})
    assert headline_for(["auto"], {"a": 2}, 4) == (["lade-auto"], {"a": 4})
    assert headline_for(["pld"], 3, 5) == ([], None)  # no auto: no headline
    with pytest.raises(ValueError, match="per set"):
        headline_for(["auto"], 3, {"humaneval": 45})


def test_a_beam_search_run_is_paired_with_plain_beam_search(tiny_dir):
    """num_beams=k: the reference is plain beam search, named beam(k) (its speedup is 1 and its output the one every
    other method is compared with); summarize finds it by that name. Methods that cannot run beams, and a bad beam
    count, are refused before any work."""
    model, tok = load_model(str(tiny_dir))
    df = run_benchmark(model, tok, ("mt_bench",), [], max_new_tokens=6, n_prompts=2, ignore_eos=True,
                       progress=False, num_beams=2, repeats=2)
    assert set(df["method"]) == {"beam(2)", "beam(2) (A/A)"} and df["matches_greedy"].all()
    assert (df[df["method"] == "beam(2)"]["speedup"] == 1.0).all()
    assert summarize(df)["method"].tolist() == ["beam(2)", "beam(2) (A/A)"]
    assert df.attrs["provenance"]["params"]["num_beams"] == 2
    for bad, match in (({"num_beams": 0}, "positive integer"), ({"num_beams": 2, "methods": [Method.prompt_lookup(4)]},
                                                                "do not run beam search")):
        kwargs = {"methods": [], **bad}
        with pytest.raises(ValueError, match=match):
            run_benchmark(model, tok, ("mt_bench",), kwargs.pop("methods"), max_new_tokens=4, n_prompts=1,
                          progress=False, **kwargs)


def test_rows_hold_the_median_of_their_repeats_and_an_aa_row(results):
    """Every row keeps each repeat's wall time and its `wall_s` is their median (the median repeat's); per prompt,
    the A/A row compares
    greedy's first repeat (reference_wall_s) with its second (wall_s), so the summary puts the noise floor beside
    each method."""
    df = results
    assert df.attrs["provenance"]["params"]["repeats"] == 3
    timed = df[df["method"] != "greedy (A/A)"]
    assert (timed["wall_s_repeats"].map(len) == 3).all()
    assert all(r.wall_s == pytest.approx(sorted(r.wall_s_repeats)[1]) for r in timed.itertuples())
    assert timed["reference_wall_s"].isna().all()
    greedy = df[df["method"] == "greedy"].set_index(["prompt_set", "prompt_id"])
    aa = df[df["method"] == "greedy (A/A)"].set_index(["prompt_set", "prompt_id"])
    assert list(aa.index) == list(greedy.index)
    for key, row in aa.iterrows():
        first, second = greedy.loc[key, "wall_s_repeats"][:2]
        assert (row["reference_wall_s"], row["wall_s"]) == (first, second)
        assert row["speedup"] == pytest.approx(first / second) and row["matches_greedy"]
    summary = summarize(df).set_index(["prompt_set", "method"])
    expected = aa.loc["mt_bench", "reference_wall_s"].sum() / aa.loc["mt_bench", "wall_s"].sum()
    assert summary.loc[("mt_bench", "greedy (A/A)"), "speedup"] == pytest.approx(expected)


def test_repeats_are_checked_before_any_work(tiny_dir):
    model, tok = load_model(str(tiny_dir))
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="repeats must be a positive integer"):
            run_benchmark(model, tok, ("mt_bench",), [], n_prompts=1, progress=False, repeats=bad)
