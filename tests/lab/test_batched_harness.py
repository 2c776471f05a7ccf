"""The batched-throughput harness (lab.harness.batched) on a tiny model: every batch's rows against plain batched
greedy,
its records, the step widths, the rotation of the run order and the summary over batches."""

import pandas as pd
import pytest
import torch

from lab.harness.batched import (
    AGAIN,
    BATCH_COLUMNS,
    POOLED,
    check_rows,
    main,
    run_batched,
    spread_prompts,
    summarize_batches,
)
from lab.harness.bench import REPEATS
from lab.harness.methods import Method
from lab.harness.models import load_model
from lab.harness.prompts import SPEC_BENCH_TASKS, load_prompts
from lab.harness.results import load_results, save_results
from lab.pipeline.plan import notebook_work
from lab.pipeline.specs import model_entries, notebook_parameters
from lab.studies.batch_headroom import HEADROOM_COLUMNS, headroom, replay
from lab.studies.batch_headroom import main as headroom_main
from lade.rows import row_lengths
from tiny_hub import save_tiny_chat_model

FLAT = lambda q: 1e-3  # noqa: E731  a latency model where wide steps are free: auto drafts


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    torch.set_num_threads(1)
    folder = save_tiny_chat_model(tmp_path_factory.mktemp("tiny_chat"))
    return folder, *load_model(str(folder))


@pytest.fixture(scope="module")
def results(tiny):
    _, model, tok = tiny
    return run_batched(model, tok, ("mt_bench", "spec_bench"), (1, 2, 4), [Method.auto(), Method.lade(3, 2, 2)],
                       n_prompts=4, max_new_tokens=10, progress=False, latency=FLAT)


def test_rows_equal_plain_batched_greedy_and_records_are_consistent(results):
    """fp32 greedy lookahead must reproduce plain batched greedy row for row (the core's guarantee; the harness
    checks and records it). With EOS ignored every row makes max_new_tokens, plain greedy takes one forward per
    token for the whole batch, so its compression, tokens per row and step are 1 and each step computes `rows`
    tokens; lade(3,2,2) feeds more than one token per row and step (its window alone 1 + W(N-1) = 5, candidates on top,
    at most 1 + (W + G)(N - 1) = 9)."""
    df = results
    assert list(df.columns) == list(BATCH_COLUMNS)
    assert len(df) == 2 * (4 + 2 + 1) * 4  # sets x batches of sizes 1, 2, 4 x (methods and greedy's A/A)
    assert df["matches_greedy"].all() and (df["rows_identical"] == df["rows"]).all()
    assert (df["new_tokens"] == 10 * df["rows"]).all()
    greedy = df[df["method"] == "greedy"]
    assert (greedy["compression"] == 1.0).all() and (greedy["speedup"] == 1.0).all()
    assert (df[df["method"] != "greedy (A/A)"]["wall_s_repeats"].map(len) == 3).all()
    assert all(r.wall_s == sorted(r.wall_s_repeats)[1] for r in df[df["method"] != "greedy (A/A)"].itertuples())
    aa = df[df["method"] == "greedy (A/A)"]
    assert len(aa) == 2 * (4 + 2 + 1) and aa["matches_greedy"].all() and not aa["first"].any()
    assert all(r.speedup == pytest.approx(r.reference_wall_s / r.wall_s) for r in aa.itertuples())
    assert list(aa["reference_wall_s"]) == [w[0] for w in greedy["wall_s_repeats"]]
    assert list(aa["wall_s"]) == [w[1] for w in greedy["wall_s_repeats"]]
    assert prov_repeats(df) == 3
    assert (greedy["row_width"] == 1.0).all() and (greedy["plain_steps"] == 1.0).all()
    assert all(widths == [rows] * 9 for widths, rows in zip(greedy["step_widths"], greedy["rows"]))
    fixed = df[df["method"] == "lade(3,2,2)"]
    assert (fixed["row_width"] > 1).all() and (fixed["row_width"] <= 9).all()
    assert (greedy["draft_nodes"] == 0).all() and (greedy["undrafted_row_steps"] == 1).all()
    assert (fixed["draft_nodes"] <= 2 * 2).all()  # G candidates of N - 1 tokens each, as the core's row stats count
    assert (df.loc[df["method"] != "greedy", "draft_nodes"] > 0).any()
    assert ((df["compression"] - df["new_tokens"] / df["row_steps"]).abs() < 1e-12).all()
    assert all(len(c) == r for c, r in zip(df["row_compression"], df["rows"]))
    assert (df["step_tokens"] >= df["row_width"]).all()
    auto = df[df["method"] == "lade-auto"]
    assert auto["config"].str.len().gt(0).all() and (greedy["config"] == "").all()
    prov = df.attrs["provenance"]
    assert prov["params"]["batch_sizes"] == [1, 2, 4] and prov["params"]["latency"] == "given"


def prov_repeats(df: pd.DataFrame) -> int:
    return df.attrs["provenance"]["params"]["repeats"]


def test_each_batch_runs_its_methods_in_a_rotating_order(results):
    """Exactly one method runs first on each batch, and consecutive batches start with different methods, so no
    method always gets the warmer (or colder) machine."""
    firsts = results[results["first"]].groupby(["prompt_set", "batch_size", "batch"], sort=False)["method"]
    assert (firsts.count() == 1).all()
    order = list(firsts.first())
    assert all(a != b for a, b in zip(order, order[1:]))


def test_spec_bench_batches_mix_its_tasks():
    """'spec_bench' takes the first questions of its six tasks in turn: six consecutive prompts hold one per task."""
    rows = spread_prompts("spec_bench", 8)
    assert [r["encode_as"] for r in rows[:6]] == [f"spec_bench:{t}" for t in SPEC_BENCH_TASKS]
    first = {t: str(load_prompts(f"spec_bench:{t}", 2)[i]["id"]) for i, t in ((0, "mt_bench"), (1, "translation"))}
    assert rows[0]["id"] == first["mt_bench"] and rows[7]["id"] == first["translation"]
    assert [r["id"] for r in spread_prompts("humaneval", 3)] == [str(r["id"]) for r in load_prompts("humaneval", 3)]


def test_summary_pairs_each_batch_with_plain_greedy(results):
    """A batch is the paired unit: the ratio is plain's total time over lade's on the same batches, and the pooled
    "all" rows count every set's batches."""
    summary = summarize_batches(results).set_index(["prompt_set", "batch_size", "method"])
    assert summary.loc[("mt_bench", 1, "lade-auto"), "batches"] == 4
    assert summary.loc[(POOLED, 1, "lade-auto"), "batches"] == 8
    assert summary.loc[(POOLED, 4, "lade(3,2,2)"), "batches"] == 2
    part = results[(results["prompt_set"] == "mt_bench") & (results["batch_size"] == 2)]
    ratio = part.loc[part["method"] == "greedy", "wall_s"].sum() / part.loc[part["method"] == "lade-auto",
                                                                            "wall_s"].sum()
    assert summary.loc[("mt_bench", 2, "lade-auto"), "speedup"] == pytest.approx(ratio)
    assert (summary.xs("greedy", level="method")["speedup"] == 1.0).all()
    assert (summary["rows_identical"] == 1.0).all()


def test_results_round_trip_with_lists(results, tmp_path):
    """The per-row and per-step lists survive the JSONL file, with the provenance beside it; the summary's estimates
    are the same from the file (its floats keep 10 digits, so only the bootstrap's interval ends may move)."""
    path = save_results(results, tmp_path / "batches.jsonl")
    back = load_results(path)
    assert back["step_widths"].tolist() == results["step_widths"].tolist()
    assert back.attrs["provenance"]["params"]["n_prompts"] == 4
    columns = ["speedup", "compression", "step_tokens", "row_width", "plain_steps", "rows_identical"]
    pd.testing.assert_frame_equal(summarize_batches(back)[columns], summarize_batches(results)[columns], rtol=1e-6)


def test_repeat_plain_adds_an_a_a_pair_to_every_batch(tiny, tmp_path):
    """repeat_plain (--repeat-plain) runs plain batched greedy a second time on every batch, in the rotation like any
    method: its rows equal the first run's, it is summarized beside the lade methods, and the provenance says so."""
    folder, model, tok = tiny
    df = run_batched(model, tok, ("mt_bench",), (1, 2), [Method.lade(3, 2, 2)], n_prompts=2, max_new_tokens=6,
                     progress=False, latency=FLAT, repeat_plain=True, repeats=1)
    again = df[df["method"] == AGAIN.name]
    assert len(again) == 2 + 1 and again["matches_greedy"].all() and (again["compression"] == 1.0).all()
    assert df.groupby(["batch_size", "batch"])["method"].nunique().eq(3).all()
    assert set(df.loc[df["first"], "method"]) <= {"greedy", AGAIN.name, "lade(3,2,2)"}
    summary = summarize_batches(df)
    assert AGAIN.name in set(summary["method"]) and summary["speedup"].gt(0).all()
    assert df.attrs["provenance"]["params"]["repeat_plain"] is True
    assert "repeat_plain" not in run_batched(model, tok, ("mt_bench",), (1,), [Method.lade(3, 2, 2)], n_prompts=1,
                                             max_new_tokens=2, progress=False, latency=FLAT,
                                             warmup=False).attrs["provenance"]["params"]
    out = tmp_path / "aa.jsonl"
    cli = main(["--model", str(folder), "--sets", "humaneval", "--n", "1", "--batch-sizes", "1", "--max-new-tokens",
                "4", "--methods", "", "--config", "3,2,2", "--repeat-plain", "--repeats", "1", "--threads", "1",
                "--out", str(out)])
    assert set(cli["method"]) == {"greedy", AGAIN.name, "lade(3,2,2)"}


def test_bad_settings_are_refused_before_any_work(tiny):
    """Each bad setting raises with what to change, before a prompt is encoded or the model runs."""
    _, model, tok = tiny
    for kwargs, message in [(dict(methods=[Method.greedy()]), "give lade methods"),
                            (dict(methods=[Method.auto(), Method.auto()]), "unique"),
                            (dict(methods=[Method("greedy-again", "lade", "auto:mixed")]), "other than"),
                            (dict(batch_sizes=(1, 0)), "distinct positive integers"),
                            (dict(batch_sizes=(2, 2)), "distinct positive integers"),
                            (dict(batch_sizes=(1, 8), n_prompts=4), "cannot fill a batch of 8")]:
        with pytest.raises(ValueError, match=message):
            run_batched(model, tok, ("mt_bench",), **{"n_prompts": 4, **kwargs}, progress=False, latency=FLAT)


def test_row_lengths_stop_at_the_first_eos():
    """A row counts its tokens up to and including its first EOS (the padding after it is not generated): the rule
    lade's hand-over to plain decoding counts by (lade.rows), which the harness reuses."""
    new = torch.tensor([[5, 6, 2, 2], [5, 6, 7, 8], [2, 0, 0, 0]])
    assert row_lengths(new, torch.tensor([2])) == [3, 4, 1]
    assert row_lengths(new, torch.tensor([9, 2])) == [3, 4, 1]
    assert row_lengths(new, None) == row_lengths(new, torch.tensor([], dtype=torch.long)) == [4, 4, 4]


def test_cli_writes_results(tiny, tmp_path, capsys):
    """python -m lab.harness.batched runs a fixed config on a model folder and writes the results file."""
    folder, _, _ = tiny
    out = tmp_path / "b.jsonl"
    df = main(["--model", str(folder), "--sets", "humaneval", "--n", "2", "--batch-sizes", "1,2",
               "--max-new-tokens", "6", "--methods", "", "--config", "3,2,2", "--threads", "1", "--out", str(out)])
    assert out.exists() and set(df["method"]) == {"greedy", "lade(3,2,2)", "greedy (A/A)"}
    assert df["matches_greedy"].all()
    assert "lade(3,2,2)" in capsys.readouterr().out


def test_check_rows_asserts_exactness_in_fp32_only(results):
    """fp32 rows must equal plain batched greedy (the check names the batch); in bf16 a differing row is measured."""
    table = check_rows(results)
    assert (table["identical"] == 1.0).all() and set(table["method"]) == {"lade-auto", "lade(3,2,2)"}
    broken = results.copy()
    index = broken.index[broken["method"] == "lade-auto"][0]
    broken.loc[index, ["matches_greedy", "rows_identical"]] = [False, 0]
    with pytest.raises(AssertionError, match="mt_bench/B=1/batch 0/lade-auto"):
        check_rows(broken)
    table = check_rows(broken.assign(dtype="bfloat16")).set_index(["prompt_set", "batch_size", "method"])
    assert table.loc[("mt_bench", 1, "lade-auto"), "identical"] == 0.75


def test_plan_prices_one_prompt_per_batch():
    """--plan prices notebook 09 per batch (a step of B rows reads the weights once): ceil(n / B) batches of each size
    for plain greedy and each lade method on every set."""
    [entry] = model_entries("embedded", [], [], "auto", "09_batches")
    p = notebook_parameters("09_batches") | {"n_prompts": 10, "batch_sizes": [1, 4], "prompt_sets": ["humaneval"]}
    work = {(w.dataset, w.method): w.prompts for w in notebook_work("09_batches", p, entry)}
    assert {w.repeats for w in notebook_work("09_batches", p, entry)} == {REPEATS}
    assert work == {("humaneval", "greedy B=1"): 10, ("humaneval", "lade-auto B=1"): 10,
                    ("humaneval", "greedy B=4"): 3, ("humaneval", "lade-auto B=4"): 3}


def test_replay_prices_padded_and_ragged_steps_as_rows_leave():
    """Rows fed 3, 1 then 2 tokens (alone) and 1, 1: two steps of both rows, then one of the first alone. Padded:
    2 x 3, 2 x 1, then 2; ragged: 4, 2, then 2 (a latency of q seconds counts tokens)."""
    assert replay([[3, 1, 2], [1, 1]], lambda q: q) == (6 + 2 + 2, 4 + 2 + 2)


def test_headroom_replays_every_batch_from_its_rows_alone(results):
    """Every lade batch of size > 1 gets a row; padded steps never cost less than ragged ones; priced by a latency
    that counts tokens, plain greedy's 9 steps of B tokens cost 9 B."""
    table = headroom(results, lambda q: float(q))
    lade = results[(results["batch_size"] > 1) & (results["method"] != "greedy")]
    assert list(table.columns) == list(HEADROOM_COLUMNS) and len(table) == len(lade)
    assert (table["plain_s"] == 9.0 * table["rows"]).all()
    assert (table["padded_s"] >= table["ragged_s"]).all() and (table["padded"] <= table["ragged"]).all()
    assert table["measured"].tolist() == lade["speedup"].tolist()
    with pytest.raises(ValueError, match="include batch size 1"):
        headroom(results[results["batch_size"] > 1], lambda q: float(q))


def test_headroom_cli_reads_notebook_results(results, tmp_path, capsys):
    save_results(results, tmp_path / "batches.jsonl")
    device = results.attrs["provenance"]["device"]
    latency = pd.DataFrame({"source": "measured", "gpu": device, "model": "tiny", "q": [1, 2, 4, 8],
                            "seconds": [1.0, 1.1, 1.3, 2.0]})
    save_results(latency.assign(gpu="another device"), tmp_path / "latency.csv")
    with pytest.raises(SystemExit):  # a profile of another device prices nothing here
        headroom_main(["--batches", str(tmp_path / "batches.jsonl"), "--latency", str(tmp_path / "latency.csv")])
    assert "no latency profile measured on" in capsys.readouterr().err
    save_results(latency, tmp_path / "latency.csv")
    table = headroom_main(["--batches", str(tmp_path / "batches.jsonl"), "--latency", str(tmp_path / "latency.csv"),
                           "--out", str(tmp_path / "headroom.csv")])
    assert "ragged_low" in capsys.readouterr().out
    assert load_results(tmp_path / "headroom.csv").shape == table.shape
