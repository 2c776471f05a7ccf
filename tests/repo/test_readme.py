"""The README stays short and true: its results table and the default run's time are exactly what lab.pipeline.readme
generates from the committed results files, it keeps the test command CI runs, and no project file cites notes outside
the repository."""

import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from lab.harness import stats
from lab.harness.results import save_results
from lab.pipeline import readme, run_times

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"


def test_readme_results_block_is_generated_from_the_committed_results():
    """A number in the README's table that no results file gives would be typed by hand; the block must be
    byte-for-byte the generator's output (run `python -m lab.pipeline.readme` after a run to refresh it)."""
    block = readme.readme_block(README.read_text())
    assert block is not None, "README.md lacks the results block markers"
    assert block == readme.results_block(REPO / "data" / "results")


def test_readme_timing_block_is_generated_from_the_committed_run_times():
    """The default run's measured time (total and per notebook) comes from data/results/run_all_times.csv, which
    run_all.sh writes at the end of the run, and the checks' times from check_times.csv (scripts/time_checks.sh,
    whose timed suite runs this test before it records), never from a typed number."""
    block = readme.readme_block(README.read_text(), readme.TIMING_START, readme.TIMING_END)
    assert block is not None, "README.md lacks the timing block markers"
    assert block == readme.timing_block(REPO / "data" / "results")
    assert "(no timed default run yet" not in block, "the committed results lack data/results/run_all_times.csv"


def test_run_times_record_the_total_and_each_notebook_and_say_whether_the_budget_held(tmp_path):
    """run_all.sh's per-notebook log becomes a results file with provenance; the sentence names the commit, the total
    with set-up, each notebook's minutes and whether the 75-minute budget held."""
    log = tmp_path / "run_times.tsv"
    log.write_text("01_mt_bench_speedup\t186\n02_humaneval_speedup\t300\n")
    run_times.record(log, total_s=4600, spec="embedded-cpu.yaml", out=tmp_path / run_times.RESULTS_NAME)
    sentence = run_times.timing_sentence(tmp_path)
    assert "took 76 min 40 s with set-up (486 s of notebooks)" in sentence
    assert "01: 3.1, 02: 5.0" in sentence and "over its 75-minute budget by 1 min 40 s" in sentence
    log.write_text("")
    with pytest.raises(ValueError, match="names no notebook"):
        run_times.record(log, total_s=10, spec="x", out=tmp_path / "empty.csv")


def test_check_times_record_pytest_counts_and_each_checks_budget(tmp_path):
    """scripts/time_checks.sh's two times become a results file; the sentence gives each command's time, pytest's
    counts and whether its budget (15 and 10 minutes) held. A log without pytest's summary line is an error."""
    log = tmp_path / "tests.log"
    log.write_text("....\n===== 811 passed, 2 skipped, 3 warnings in 720.80s (0:12:00) =====\n")
    assert run_times.pytest_summary(log) == "811 passed, 2 skipped"
    run_times.record_checks(732, run_times.pytest_summary(log), 640, out=tmp_path / run_times.CHECKS_NAME)
    sentence = run_times.checks_sentence(tmp_path)
    assert "`./run_tests.sh` took 12 min 12 s (within its 15-minute budget; 811 passed, 2 skipped)" in sentence
    assert "`./run_all.sh --quick` took 10 min 40 s (over its 10-minute budget)" in sentence
    log.write_text("collected 3 items\nKeyboardInterrupt\n")
    with pytest.raises(ValueError, match="no pytest summary line"):
        run_times.pytest_summary(log)


def test_results_block_names_the_commit_and_hides_intervals_below_five_prompts(tmp_path):
    """Each row names the results file and the commit (dirty flag included) from its provenance, and a method
    that ran on fewer than 5 prompts gets no interval: a bootstrap over 2-4 points is not an interval."""
    rows = []
    for prompt in range(6):
        for method in ("greedy", "lade-auto", "pld(10)"):
            if method == "pld(10)" and prompt >= 3:
                continue
            wall = 2.0 if method == "greedy" else 1.0 + 0.1 * prompt
            rows.append({"prompt_set": "mt_bench", "prompt_id": str(prompt), "method": method, "config": "",
                         "new_tokens": 32, "wall_s": wall, "forward_calls": 32 if method == "greedy" else 20,
                         "step_tokens": 1.0, "single_token_steps": 0.0, "forward_s": wall, "tokens_per_s": 32 / wall,
                         "matches_greedy": True, "speedup": 1.0, "compression": 1.0, "host_share": 0.0})
    df = pd.DataFrame(rows)
    df.attrs["provenance"] = {"git_commit": "0123456789abcdef", "git_dirty": True, "device": "cpu",
                              "params": {"dtype": "torch.float32", "max_new_tokens": 32}}
    save_results(df, tmp_path / "mt_bench.jsonl")
    block = readme.results_block(tmp_path)
    auto, pld = [line for line in block.splitlines() if line.startswith("| MT-Bench")]
    assert "@ 0123456 (dirty)" in auto and "`data/results/mt_bench.jsonl`" in auto
    assert re.search(r"\| 6 \| \d\.\d\dx \[\d\.\d\d, \d\.\d\d\] \|", auto)
    assert "| 3 |" in pld and "no interval" in pld


def test_readme_is_short_and_keeps_the_two_commands():
    """At most 250 lines; the two commands CI and readers run are there verbatim."""
    text = README.read_text()
    assert len(text.splitlines()) <= 250
    assert "./run_tests.sh      # set-up, then the test suite" in text and "\n./run_all.sh " in text


def test_no_project_file_cites_notes_outside_the_repository():
    """Every source a project file names must be in the repository or public."""
    private = "|".join(["ANCH" + "ORS", "STY" + r"LE\.md", "DES" + r"IGN\.md", r"\.\./sha" + "red"])  # in parts:
    # so that this file does not match itself. Results files are excluded: the next run regenerates them.
    found = subprocess.run(["git", "-C", str(REPO), "grep", "-nE", private, "--", ":!data/results"],
                           capture_output=True, text=True).stdout
    assert not found, found


def test_readme_opens_with_its_claims_table_generated_from_the_results():
    """The claims table sits above the first section, is byte-for-byte the generator's output, labels GPU-class
    numbers as modelled, marks the flash-attn CUDA kernel untested, and the results table shows where lookahead does
    not pay on a CPU (sampling at T = 1, the widest ablation window, the largest batch)."""
    text = README.read_text()
    block = readme.readme_block(text, readme.CLAIMS_START, readme.CLAIMS_END)
    assert block is not None, "README.md lacks the claims block markers"
    assert text.index(readme.CLAIMS_START) < text.index("\n## ")
    assert block == readme.claims_block(REPO / "data" / "results")
    assert "*modelled* (leave-one-out error" in block
    assert re.search(r"\| the flash-attn CUDA kernel itself \|.*\| \*untested\*", block)
    results = readme.readme_block(text)
    assert "sampling T = 1 |" in results and "W=15, G=15" in results and "batch 4" in results


def test_the_batch_row_where_lookahead_may_not_pay_names_a_method_not_the_noise_floor():
    """The results table's largest-batch row compares a lade method with plain batched greedy; the A/A row (plain
    against itself) stands beside it in the claims table, never in its place."""
    rows = [r for r in readme.unfavourable_rows(REPO / "data" / "results") if r["set"].startswith("all sets, batch")]
    assert rows and not any(stats.is_aa(r["method"]) for r in rows), rows
