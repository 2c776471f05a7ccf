"""Measured run times as results files that the README's timing block is generated from (lab.pipeline.readme), so no
time
in the README is typed by hand:

- data/results/run_all_times.csv: what the default ./run_all.sh took, per notebook and end to end.
  `python -m lab.pipeline.run_times default LOG --total SECONDS --spec SPEC`: LOG holds one `notebook<TAB>seconds` line
  per
  notebook (run_all.sh writes it as it goes); SECONDS is the script's time so far, set-up included.
- data/results/check_times.csv: what the two checks CI runs took, one after the other on an idle machine.
  `python -m lab.pipeline.run_times checks --tests SECONDS --tests-log LOG --quick SECONDS` (scripts/time_checks.sh).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pandas as pd

from lab.harness.paths import results_dir
from lab.harness.provenance import commit_label, provenance
from lab.harness.results import load_results, save_results

RESULTS_NAME = "run_all_times.csv"
CHECKS_NAME = "check_times.csv"
BUDGET_S = 75 * 60  # the default run's time budget on a 2-core machine
CHECK_BUDGETS_S = {"./run_tests.sh": 15 * 60, "./run_all.sh --quick": 10 * 60}  # each check's budget, same machine


def record(log: Path, total_s: int, spec: str, out: Path | None = None) -> Path:
    """Write LOG's per-notebook seconds, with the run's total (set-up included) and spec in the provenance."""
    if not Path(log).read_text().strip():
        raise ValueError(f"{log} names no notebook: nothing to record")
    rows = pd.read_csv(log, sep="\t", names=["notebook", "seconds"], dtype={"notebook": str, "seconds": int})
    rows.attrs["provenance"] = provenance(spec=spec, total_s=int(total_s), notebooks_s=int(rows["seconds"].sum()))
    return save_results(rows, out or results_dir() / RESULTS_NAME)


def pytest_summary(log: Path) -> str:
    """The counts of pytest's last summary line in LOG, e.g. "811 passed, 2 skipped"."""
    lines = [line for line in Path(log).read_text().splitlines() if re.search(r"\d+ passed", line)]
    if not lines:
        raise ValueError(f"{log} has no pytest summary line (`N passed ...`): did the suite run to the end?")
    counts = re.findall(r"\d+ (?:passed|failed|skipped|xfailed|xpassed|errors?|deselected)", lines[-1])
    return ", ".join(counts)


def record_checks(tests_s: int, tests_summary: str, quick_s: int, out: Path | None = None) -> Path:
    """Write the two checks' seconds (the suite's pytest counts beside it) as one results file with provenance."""
    rows = pd.DataFrame({"command": list(CHECK_BUDGETS_S), "seconds": [int(tests_s), int(quick_s)],
                         "summary": [tests_summary, ""]})
    rows.attrs["provenance"] = provenance()
    return save_results(rows, out or results_dir() / CHECKS_NAME)


def _min_s(seconds: int) -> str:
    return f"{seconds // 60} min {seconds % 60} s" if seconds >= 60 else f"{seconds} s"


def _load(folder: Path | None, name: str) -> tuple[pd.DataFrame, dict] | None:
    """`folder`'s (default: data/results/) times file `name` and its provenance, or None when absent."""
    path = (folder or results_dir()) / name
    if not path.exists():
        return None
    rows = load_results(path)
    return rows, rows.attrs.get("provenance", {})


def checks_sentence(folder: Path | None = None) -> str | None:
    """The README's sentence on the checks' times, from `folder`'s check_times.csv (None when absent)."""
    if (loaded := _load(folder, CHECKS_NAME)) is None:
        return None
    rows, prov = loaded
    parts = []
    for r in rows.itertuples():
        budget = CHECK_BUDGETS_S[r.command]
        held = "within" if r.seconds <= budget else "over"
        counts = f"; {r.summary}" if isinstance(r.summary, str) and r.summary else ""
        parts.append(f"`{r.command}` took {_min_s(r.seconds)} ({held} its {budget // 60}-minute budget{counts})")
    return (f"At {commit_label(prov)} on {prov.get('device', '?')}, one after the other with set-up already done: "
            f"{'; '.join(parts)} (`data/results/{CHECKS_NAME}`).")


def timing_sentence(folder: Path | None = None) -> str | None:
    """The README's sentence on the default run's time, from `folder`'s run_all_times.csv (None when absent)."""
    if (loaded := _load(folder, RESULTS_NAME)) is None:
        return None
    rows, prov = loaded
    params = prov.get("params", {})
    total = int(params["total_s"])
    budget = (f"within its {BUDGET_S // 60}-minute budget" if total <= BUDGET_S else
              f"over its {BUDGET_S // 60}-minute budget by {_min_s(total - BUDGET_S)}")
    per = ", ".join(f"{r.notebook[:2]}: {r.seconds / 60:.1f}" for r in rows.itertuples())
    return (f"The default `./run_all.sh` at {commit_label(prov)}, which wrote every committed result, figure and "
            f"executed notebook, took {_min_s(total)} with set-up ({params['notebooks_s']} s of notebooks) on "
            f"{prov.get('device', '?')}, {budget}; per notebook (min): {per} "
            f"(`data/results/{RESULTS_NAME}`).")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    default = sub.add_parser("default", help="a default ./run_all.sh's times")
    default.add_argument("log", type=Path)
    default.add_argument("--total", type=int, required=True, help="the run's seconds so far, set-up included")
    default.add_argument("--spec", required=True)
    checks = sub.add_parser("checks", help="the times of ./run_tests.sh and ./run_all.sh --quick")
    checks.add_argument("--tests", type=int, required=True, help="./run_tests.sh's seconds")
    checks.add_argument("--tests-log", type=Path, required=True, help="its output (for pytest's counts)")
    checks.add_argument("--quick", type=int, required=True, help="./run_all.sh --quick's seconds")
    args = parser.parse_args(argv)
    if args.what == "default":
        print("run times written to", record(args.log, args.total, args.spec))
    else:
        print("check times written to", record_checks(args.tests, pytest_summary(args.tests_log), args.quick))


if __name__ == "__main__":
    main()
