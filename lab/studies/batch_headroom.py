"""What drafting could give at batch > 1 on a device: notebook 09's batches replayed from their rows' steps alone.

Each row of a batch replays the steps it took when decoded alone (batch size 1, same prompt, same method: the tokens
it fed in each forward, as many forwards as it took), and every step of the batch is priced by the device's
single-sequence latency profile (q tokens -> seconds) at the tokens the step feeds in all:

- padded: active rows x the widest row's tokens, as lade feeds a batch (lade.layout.stack_layouts);
- ragged: the sum of the active rows' tokens, as a batch flattened into one sequence would feed them.

A plain batched step is priced the same way (B tokens), so `padded` and `ragged` estimate drafting "as alone" over
plain batched greedy, decode steps only (prefill and host work left out). They are estimates, not bounds: at batch > 1
a planner may size narrower trees than alone. `modelled` prices the batch's own measured lade steps the same way, beside
its measured speedup (`measured`, prefill and host work included): how far the pricing can be trusted.

    python -m lab.studies.batch_headroom --batches data/results/batches.jsonl --latency data/results/latency.csv
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from lab.harness.batched import REFERENCE
from lab.harness.provenance import provenance
from lab.harness.results import load_results, report
from lab.harness.stats import interval, ratio_of_sums
from lade.cost import LatencyProfile

HEADROOM_COLUMNS = {
    "prompt_set": "prompt set of the batch",
    "batch_size": "rows per batch asked for",
    "batch": "index of the batch within its set at this batch size",
    "rows": "rows in the batch",
    "method": "the lade method whose steps are replayed",
    "plain_s": "priced seconds of plain batched greedy's decode steps (B tokens each)",
    "padded_s": "priced seconds of the rows' alone steps fed together, padded to the widest row",
    "ragged_s": "priced seconds of the same steps fed ragged (the sum of the rows' tokens)",
    "modelled_s": "priced seconds of the batch's own measured lade steps",
    "padded": "plain_s / padded_s: drafting as alone in padded batch steps, over plain batched greedy",
    "ragged": "plain_s / ragged_s: the same with ragged batch steps",
    "modelled": "plain_s / modelled_s",
    "measured": "the batch's measured lade speedup over plain batched greedy (prefill and host work included)",
}


def replay(widths: Sequence[Sequence[int]], latency: Callable[[float], float]) -> tuple[float, float]:
    """widths[b][t]: tokens row b fed in its t-th forward alone -> (padded, ragged) priced seconds of the batch whose
    rows take those steps together, each row leaving after its last."""
    padded = ragged = 0.0
    for t in range(max(map(len, widths))):
        active = [w[t] for w in widths if t < len(w)]
        padded += latency(len(active) * max(active))
        ragged += latency(sum(active))
    return padded, ragged


def headroom(batches: pd.DataFrame, latency: Callable[[float], float]) -> pd.DataFrame:
    """Every batch of size > 1 in notebook 09's results (lab.harness.batched.BATCH_COLUMNS, batch size 1 included) and
    each lade
    method -> one row of HEADROOM_COLUMNS. latency: the single-sequence profile (q -> seconds)."""
    alone = batches[batches["batch_size"] == 1]
    traces = {(r.prompt_set, r.method, r.prompt_ids): list(r.step_widths) for r in alone.itertuples()}
    priced = lambda widths: sum(latency(w) for w in widths)  # noqa: E731
    plain = batches[batches["method"] == REFERENCE].set_index(["prompt_set", "batch_size", "batch"])
    out = []
    for r in batches[(batches["batch_size"] > 1) & (batches["method"] != REFERENCE)].itertuples():
        rows = [traces.get((r.prompt_set, r.method, p)) for p in r.prompt_ids.split(",")]
        if any(w is None for w in rows):
            raise ValueError(f"{r.prompt_set}/B={r.batch_size}/batch {r.batch}: not every prompt of the batch was "
                             f"run alone by {r.method}; include batch size 1 in the run")
        plain_s = priced(plain.loc[(r.prompt_set, r.batch_size, r.batch), "step_widths"])
        padded_s, ragged_s = replay(rows, latency)
        modelled_s = priced(r.step_widths)
        out.append({"prompt_set": r.prompt_set, "batch_size": r.batch_size, "batch": r.batch, "rows": r.rows,
                    "method": r.method, "plain_s": plain_s, "padded_s": padded_s, "ragged_s": ragged_s,
                    "modelled_s": modelled_s, "padded": plain_s / padded_s, "ragged": plain_s / ragged_s,
                    "modelled": plain_s / modelled_s, "measured": r.speedup})
    return pd.DataFrame(out, columns=list(HEADROOM_COLUMNS))


def summarize_headroom(table: pd.DataFrame) -> pd.DataFrame:
    """Per (batch_size, method): batches, and for padded, ragged and modelled the ratio of total priced times over the
    batches with a 95% bootstrap interval over batches (lab.harness.stats.interval; NaN for one batch), and the measured
    speedups' median."""
    out = []
    for (size, method), part in table.groupby(["batch_size", "method"], sort=True):
        row = {"batch_size": size, "method": method, "batches": len(part), "measured": part["measured"].median()}
        plain = part["plain_s"].to_numpy(float)
        for name in ("padded", "ragged", "modelled"):
            other = part[f"{name}_s"].to_numpy(float)
            low, high = interval(ratio_of_sums, [plain, other])
            row |= {name: float(ratio_of_sums(plain, other)), f"{name}_low": low, f"{name}_high": high}
        out.append(row)
    return pd.DataFrame(out)


def measured_profile(latency: pd.DataFrame, device: str) -> LatencyProfile | None:
    """Notebook 04's latency.csv -> the single-sequence profile it measured on `device` (a provenance's device
    label), None when it measured none there."""
    measured = latency[(latency["source"] == "measured") & (latency["gpu"] == device)]
    if measured.empty:
        return None
    if measured["model"].nunique() != 1:
        raise ValueError(f"latency.csv holds measured profiles of several models on {device}; keep one")
    return LatencyProfile(device, 0, tuple(measured["q"]), tuple(measured["seconds"]))


def replayed(batches: pd.DataFrame, latency_path: Path) -> pd.DataFrame:
    """Notebook 09's table: `headroom` of its batches priced by notebook 04's profile on the batches' device (read
    from latency_path), with provenance; no rows, and the reason in the provenance's `missing`, where the run has no
    batch size 1 or notebook 04 measured no profile on this device."""
    prov = batches.attrs.get("provenance", {})
    device = prov.get("device", "")
    latency = load_results(latency_path) if latency_path.exists() else None
    profile = measured_profile(latency, device) if latency is not None else None
    missing = ("no batch size 1 in the run" if not (batches["batch_size"] == 1).any() else
               f"no latency profile measured on {device} in {latency_path.name}" if profile is None else None)
    table = headroom(batches, profile) if missing is None else pd.DataFrame(columns=list(HEADROOM_COLUMNS))
    inputs = {"batches_commit": prov.get("git_commit"),
              "latency_commit": latency.attrs.get("provenance", {}).get("git_commit") if latency is not None else None}
    table.attrs["provenance"] = provenance(latency_from=latency_path.name, device_priced=device, missing=missing,
                                           **inputs)
    return table


def main(argv: Sequence[str] | None = None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(prog="python -m lab.studies.batch_headroom", description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=Path, required=True, help="notebook 09's batches.jsonl (with batch size 1)")
    parser.add_argument("--latency", type=Path, required=True, help="notebook 04's latency.csv (same device)")
    parser.add_argument("--out", type=Path, default=None, help="results file (.csv)")
    args = parser.parse_args(argv)
    table = replayed(load_results(args.batches), args.latency)
    missing = table.attrs["provenance"]["params"]["missing"]
    if missing:
        parser.error(f"nothing to replay from {args.batches}: {missing}")
    report(summarize_headroom(table), table, args.out)
    return table


if __name__ == "__main__":
    main()
