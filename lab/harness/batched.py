"""Batched throughput (notebook 09): lookahead against plain batched greedy (`model.generate` on left-padded batches)
at several batch sizes, on the same prompts.

    from lab.harness.batched import run_batched, summarize_batches
    df = run_batched(model, tok, ("mt_bench", "humaneval", "spec_bench"), batch_sizes=(1, 2, 4, 8, 16),
                     n_prompts=16, max_new_tokens=128)
    print(summarize_batches(df))   # lade / plain throughput per set and batch size, 95% intervals over batches

CLI: `python -m lab.harness.batched --sets mt_bench,humaneval,spec_bench --n 16 --batch-sizes 1,2,4,8,16
--max-new-tokens 128
--methods auto --config 3,4,4 --threads 2 --out results/batches.jsonl` (`--config LABEL` repeatable).

Each set's first `n_prompts` prompts (`spec_bench`: the first questions of its six tasks in turn, so every batch mixes
tasks) are cut into consecutive batches of each size and left-padded. On every batch plain greedy and each lade method
(and with `repeat_plain`, plain greedy again: an A/A pair) run side by side, their order rotating from batch to batch,
after one untimed warm-up of each; "auto" is resolved (its latency profile measured or loaded) before any timing. With
`ignore_eos` (default) every row generates exactly `max_new_tokens`, so both methods do the same work per row. Every
lade row is compared token for token with plain greedy's row of the same batch.

Every batch runs `repeats` times (bench.REPEATS by default), the methods' order rotated each time; a row holds its
median repeat and every repeat's wall time, and plain greedy's first repeat against its second is the A/A row
(`greedy (A/A)`), the ratio that noise alone gives.

The unit of a batch-size comparison is a batch (its rows share one wall time): intervals resample batches
(lab.harness.stats),
and a batch size with fewer than five batches in a set shows its single batches instead.

Results schema: one row per (prompt set, batch size, batch, method), columns BATCH_COLUMNS; provenance in `df.attrs`.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from lab.harness.agreement import EXACT_DTYPES, first_divergence
from lab.harness.bench import checked_repeats, rotated, time_generate
from lab.harness.methods import Method, measure_row_profiles
from lab.harness.prompts import SPEC_BENCH_TASKS, Prompt, encode_prompts, load_prompts
from lab.harness.provenance import model_record, provenance
from lab.harness.results import report
from lab.harness.stats import aa_name, aa_row, median_repeat, summarize_runs
from lab.harness.timing import ForwardTimer, progress_bar
from lade.rows import left_pad, row_lengths

SETS = ("mt_bench", "humaneval", "spec_bench")
BATCH_SIZES = (1, 2, 4, 8, 16)
REFERENCE = Method.greedy().name  # plain batched greedy: every ratio's reference
AGAIN = Method("greedy-again", "greedy")  # plain batched greedy run a second time (repeat_plain): an A/A pair
POOLED = "all"  # the prompt_set of a summary over every set

BATCH_COLUMNS = {
    "model": "the model's label",
    "dtype": "the model's dtype (float32, float16, bfloat16)",
    "prompt_set": "mt_bench, humaneval or spec_bench (the six tasks in turn)",
    "batch_size": "rows per batch asked for (the set's last batch may have fewer)",
    "batch": "index of the batch within its set at this batch size",
    "prompt_ids": "ids of the batch's prompts, comma-separated, in row order",
    "rows": "rows in this batch",
    "method": "greedy (plain batched model.generate) or the lade method's name",
    "config": "lade's resolved config label (auto: its drafter and window; the planner sizes each step), '' for greedy",
    "first": "whether this method ran first on the batch (the order rotates from batch to batch)",
    "new_tokens": "tokens generated over the batch's rows",
    "wall_s": "wall-clock time of the generate call on the whole batch (prefill included)",
    "tokens_per_s": "new_tokens / wall_s",
    "forward_calls": "forward passes of the batch (prefill included)",
    "row_steps": "forwards each row took part in, summed over rows (prefill included; lade's finished rows leave)",
    "compression": "new_tokens / row_steps: tokens per forward per row (plain greedy: 1.0)",
    "row_compression": "each row's new tokens / its forwards, in row order (list)",
    "step_widths": "tokens the model computed in each forward after the prefill: rows x the widest row's tokens (list)",
    "step_tokens": "mean of step_widths",
    "row_width": "mean tokens per row and forward after the prefill (rows padded to the widest; plain greedy: 1.0)",
    "plain_steps": "share of forwards after the prefill that fed one token per row (a plain batched step)",
    "draft_nodes": "draft (candidate-tree) nodes a row fed per steady step, mean over row-steps (core row_stats "
                   "tree_nodes; plain greedy: 0)",
    "undrafted_row_steps": "share of steady row-steps that fed no draft node (the row's last token and window only)",
    "rows_identical": "rows whose output equals plain batched greedy's row token for token",
    "matches_greedy": "every row of the batch identical to plain batched greedy",
    "speedup": "tokens_per_s / plain batched greedy's tokens_per_s on the same batch",
    "wall_s_repeats": "wall-clock seconds of each repeat, in run order (`wall_s` and the other columns: the median "
                      "repeat's; the A/A row: plain batched greedy's)",
    "reference_wall_s": "the A/A row only (greedy (A/A)): plain batched greedy's first repeat, its speedup's reference "
                        "(its wall_s: the second)",
}


def spread_prompts(name: str, n: int) -> list[dict[str, Any]]:
    """The first `n` prompts of set `name` (rows with id, prompt and the set they were encoded for); 'spec_bench': the
    first questions of its six tasks in turn, so that any consecutive six hold one of each task."""
    if name != "spec_bench":
        return [{"id": str(r["id"]), "prompt": r["prompt"], "encode_as": name} for r in load_prompts(name, n)]
    per_task = {task: list(load_prompts(f"spec_bench:{task}", math.ceil(n / len(SPEC_BENCH_TASKS))))
                for task in SPEC_BENCH_TASKS}
    turns = [{"id": str(rows[i]["id"]), "prompt": rows[i]["prompt"], "encode_as": f"spec_bench:{task}"}
             for i in range(max(map(len, per_task.values()))) for task, rows in per_task.items() if i < len(rows)]
    return turns[:n]


def _encode(tokenizer, prompt_sets: Sequence[str], n_prompts: int, prompt_format: str) -> dict[str, list[Prompt]]:
    return {name: encode_prompts(tokenizer, name, spread_prompts(name, n_prompts), prompt_format)
            for name in prompt_sets}


@dataclass
class _Run:
    new: torch.Tensor  # [B, T] generated tokens (CPU), rows padded as generate pads them
    wall: float
    timer: ForwardTimer
    row_steps: list[int]  # forwards each row took part in (prefill included)
    tree_nodes: list[int]  # draft nodes of every steady row-step, all rows together


def _generate(model, method: Method, ids: torch.Tensor, mask: torch.Tensor, gen_kwargs: dict[str, Any],
              latency) -> _Run:
    """One timed batched generate call of `method` (bench.time_generate). ids, mask: [B, P] left-padded."""
    run = time_generate(model, method, ids, mask, gen_kwargs, latency, stats=True)
    row_steps = [s.steps for s in run.stats] if run.stats is not None else [run.timer.calls] * ids.shape[0]
    nodes = [n for s in run.stats or () for n in getattr(s, "tree_nodes", ())]
    return _Run(run.new, run.wall, run.timer, row_steps, nodes)


def _eos_ids(model, ignore_eos: bool) -> torch.Tensor | None:
    """The ids that end a row (lade.rows.row_lengths counts through the first), None when EOS is ignored."""
    eos = None if ignore_eos else model.generation_config.eos_token_id
    return None if eos is None else torch.tensor([eos] if isinstance(eos, int) else list(eos))


def _batch_rows(prompts: list[Prompt], size: int, batch: int, methods: list[Method], runs: dict[str, _Run],
                order: list[Method], labels: dict[str, str], eos: torch.Tensor | None) -> list[dict[str, Any]]:
    """One record per method of one batch, each paired with plain greedy's run of the same batch."""
    plain = runs[REFERENCE]
    plain_rows = [r[:n] for r, n in zip(plain.new, row_lengths(plain.new, eos))]
    records = []
    for method in methods:
        run = runs[method.name]
        lengths = row_lengths(run.new, eos)
        rows = [r[:n] for r, n in zip(run.new, lengths)]
        identical = sum(first_divergence(r, p) == -1 for r, p in zip(rows, plain_rows))
        widths = run.timer.batch_fed
        tokens = sum(lengths)
        records.append({
            "prompt_set": prompts[0].set_name, "batch_size": size, "batch": batch,
            "prompt_ids": ",".join(p.prompt_id for p in prompts), "rows": len(prompts), "method": method.name,
            "config": labels.get(method.name, ""), "first": order[0].name == method.name, "new_tokens": tokens,
            "wall_s": run.wall, "tokens_per_s": tokens / run.wall, "forward_calls": run.timer.calls,
            "row_steps": sum(run.row_steps), "compression": tokens / max(sum(run.row_steps), 1),
            "row_compression": [n / max(s, 1) for n, s in zip(lengths, run.row_steps)], "step_widths": widths,
            "step_tokens": sum(widths) / max(len(widths), 1), "row_width": run.timer.step_tokens,
            "plain_steps": run.timer.single_token_steps,
            "draft_nodes": sum(run.tree_nodes) / max(len(run.tree_nodes), 1),
            "undrafted_row_steps": run.tree_nodes.count(0) / len(run.tree_nodes) if run.tree_nodes else 1.0,
            "rows_identical": identical,
            "matches_greedy": identical == len(prompts),
        })
    reference = next(r for r in records if r["method"] == REFERENCE)
    for record in records:
        record["speedup"] = record["tokens_per_s"] / reference["tokens_per_s"]
    return records


def _with_repeats(records: list[dict[str, Any]], runs: dict[str, list[_Run]]) -> list[dict[str, Any]]:
    """Each record with its repeats' wall times, then (two or more repeats) plain greedy's A/A record
    (lab.harness.stats.aa_row): its first repeat (reference_wall_s) against its second (wall_s); its counts and
    forwards are its row's, the median repeat's."""
    out = [r | {"wall_s_repeats": [t.wall for t in runs[r["method"]]], "reference_wall_s": None} for r in records]
    if len(runs[REFERENCE]) < 2:
        return out
    reference = next(r for r in out if r["method"] == REFERENCE)
    return out + [aa_row(reference) | {"first": False}]


def _checked(methods: Sequence[Method], batch_sizes: Sequence[int], n_prompts: int, repeat_plain: bool = False
             ) -> list[Method]:
    """Plain greedy first, then the lade `methods`, then AGAIN with `repeat_plain`; refused before any work: other
    kinds, repeated names (or the plain runs'), batch sizes that are not positive integers, fewer prompts than the
    largest batch."""
    if not methods or any(m.kind != "lade" for m in methods):
        raise ValueError(f"run_batched compares lade methods with plain batched greedy: give lade methods (e.g. "
                         f"Method.auto(), Method.lade(3, 4, 4)), got {[m.name for m in methods]}")
    if len({m.name for m in methods} | {REFERENCE, AGAIN.name}) != len(methods) + 2:
        raise ValueError(f"method names must be unique and other than {REFERENCE!r} and {AGAIN.name!r} (the plain "
                         f"runs), got {[m.name for m in methods]}")
    if not batch_sizes or any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in batch_sizes) or len(
            set(batch_sizes)) != len(batch_sizes):
        raise ValueError(f"batch_sizes must be distinct positive integers, got {list(batch_sizes)}")
    if n_prompts < max(batch_sizes):
        raise ValueError(f"n_prompts={n_prompts} cannot fill a batch of {max(batch_sizes)}: give at least as many "
                         "prompts per set as the largest batch size")
    return [Method.greedy(), *methods, *([AGAIN] if repeat_plain else [])]


def run_batched(model, tokenizer, prompt_sets: Sequence[str] = SETS, batch_sizes: Sequence[int] = BATCH_SIZES,
                methods: Sequence[Method] = (Method.auto(),), n_prompts: int = 16, max_new_tokens: int = 128,
                ignore_eos: bool = True, warmup: bool = True, progress: bool = True, prompt_format: str = "auto",
                model_name: str | None = None, latency=None, repeat_plain: bool = False,
                repeats: int | None = None, **provenance_params: Any) -> pd.DataFrame:
    """Plain batched greedy and each lade method on every batch of every size (rows: BATCH_COLUMNS).

    latency: the latency model (q -> seconds) "auto" and adaptive configs plan with; None: the model's measured
    profile (lade.auto_config). prompt_format: lab.harness.prompts.encode_prompt. repeat_plain: also run plain batched
    greedy
    a second time on every batch, in the rotation like any method (rows named AGAIN.name): its ratio to the first
    run is what the run's noise alone gives. repeats: runs of every method per batch (None: bench.REPEATS), a row
    holding its median repeat; two or more add the A/A row. Returns a DataFrame; provenance in attrs.
    """
    # 1 validate before any work; resolve auto (its latency profile measured or loaded) before any timing
    everything = _checked(methods, batch_sizes, n_prompts, repeat_plain)
    repeats = checked_repeats(repeats)
    labels = {m.name: m.resolved(model, latency).config_label() for m in everything if m.kind == "lade"}
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    gen_kwargs: dict[str, Any] = {"do_sample": False, "max_new_tokens": max_new_tokens, "pad_token_id": pad}
    if ignore_eos:
        gen_kwargs["eos_token_id"] = None
    eos = _eos_ids(model, ignore_eos)
    device = next(model.parameters()).device
    # 2 encode every prompt once
    prompts = _encode(tokenizer, prompt_sets, n_prompts, prompt_format)
    # 3 warm up every method untimed on a batch of two
    if warmup:
        first = next(iter(prompts.values()))[:2]
        ids, mask = left_pad([p.tokens for p in first], pad)
        for method in everything:
            _generate(model, method, ids.to(device), mask.to(device),
                      {**gen_kwargs, "max_new_tokens": min(8, max_new_tokens)}, latency)
    # 4 per set, batch size and batch: the methods side by side, their order rotating from batch to batch
    batches = [(size, k, encoded[start : start + size]) for encoded in prompts.values()
               for size in batch_sizes for k, start in enumerate(range(0, len(encoded), size))]
    if latency is None:
        measure_row_profiles(model, everything, [len(chunk) for _, _, chunk in batches])
    records = []
    for turn, (size, k, chunk) in enumerate(progress_bar(batches, show=progress, desc="batches", unit="batch")):
        ids, mask = left_pad([p.tokens for p in chunk], pad)  # [B, P], [B, P]
        runs: dict[str, list[_Run]] = {m.name: [] for m in everything}
        for rep in range(repeats):
            for m in rotated(everything, turn + rep):
                runs[m.name].append(_generate(model, m, ids.to(device), mask.to(device), gen_kwargs, latency))
        median = {name: timed[median_repeat([r.wall for r in timed])] for name, timed in runs.items()}
        records += _with_repeats(_batch_rows(chunk, size, k, everything, median, rotated(everything, turn), labels,
                                             eos), runs)
    # 5 record
    name_or_path = getattr(model.config, "_name_or_path", "") or type(model).__name__
    label = {"model": model_name or Path(name_or_path).name, "dtype": str(model.dtype).removeprefix("torch.")}
    df = pd.DataFrame([label | r for r in records], columns=list(BATCH_COLUMNS))
    df.attrs["provenance"] = provenance(
        model=name_or_path, model_name=label["model"], **model_record(model), prompt_format=prompt_format,
        prompt_sets=list(prompt_sets), n_prompts=n_prompts, batch_sizes=list(batch_sizes),
        max_new_tokens=max_new_tokens, ignore_eos=ignore_eos, methods=labels, repeats=repeats,
        latency="given" if latency is not None else "measured profile",
        **({"repeat_plain": True} if repeat_plain else {}), **provenance_params)
    return df


def check_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """Assert that every lade row of an fp32 run (and the A/A run's, with repeat_plain) equals plain batched greedy's
    (an AssertionError names each batch that differs); return per (prompt_set, batch_size, method) the rows and the
    share identical (the measurement in fp16/bf16)."""
    lade = rows[~rows["method"].isin([REFERENCE, aa_name(REFERENCE)])]
    bad = lade[lade["dtype"].isin(EXACT_DTYPES) & ~lade["matches_greedy"].astype(bool)]
    if len(bad):
        where = ", ".join(f"{r.prompt_set}/B={r.batch_size}/batch {r.batch}/{r.method} ({r.rows_identical} of {r.rows}"
                          " rows identical)" for r in bad.itertuples())
        raise AssertionError(f"lookahead rows differ from plain batched greedy in {bad['dtype'].iloc[0]}: {where}")
    table = lade.groupby(["prompt_set", "batch_size", "method"], sort=False)[["rows", "rows_identical"]].sum()
    return table.assign(identical=table["rows_identical"] / table["rows"]).reset_index()


def _runs_table(df: pd.DataFrame, pooled: bool) -> pd.DataFrame:
    """Rows as lab.harness.stats.summarize_runs takes them: a batch is the paired unit (prompt_id), a row-step a
    forward;
    with `pooled`, every set's batches again under prompt_set POOLED."""
    runs = df.assign(prompt_id=df["prompt_set"] + "/" + df["batch"].astype(str), forward_calls=df["row_steps"])
    return pd.concat([runs, runs.assign(prompt_set=POOLED)], ignore_index=True) if pooled else runs


def summarize_batches(df: pd.DataFrame, pooled: bool = True) -> pd.DataFrame:
    """Per (prompt_set, batch_size, method), with every set pooled as prompt_set "all": batches, lade / plain
    throughput (ratio of total times; `speedup`) and compression per row with 95% bootstrap intervals over batches
    (lab.harness.stats), and totals: tokens/s, tokens computed per forward (`step_tokens`), per row (`row_width`),
    share of
    plain steps, draft nodes per row and step, share of rows identical to plain greedy."""
    runs = _runs_table(df, pooled)
    keys = ["prompt_set", "batch_size", "method"]
    out = summarize_runs(runs, reference=REFERENCE, keys=keys).rename(columns={"prompts": "batches"})
    steps = (runs["forward_calls"] - 1).clip(lower=0)
    steady = (runs["row_steps"] - runs["rows"]).clip(lower=0)  # row-steps after each row's prefill
    totals = runs.assign(fed=runs["step_tokens"] * steps, steps=steps, row_fed=runs["row_width"] * steps,
                         plain=runs["plain_steps"] * steps, nodes=runs["draft_nodes"] * steady,
                         steady=steady).groupby(keys, sort=False).agg(
        config=("config", "first"), new_tokens=("new_tokens", "sum"), wall_s=("wall_s", "sum"), fed=("fed", "sum"),
        row_fed=("row_fed", "sum"), steps=("steps", "sum"), plain=("plain", "sum"), rows=("rows", "sum"),
        nodes=("nodes", "sum"), steady=("steady", "sum"),
        identical=("rows_identical", "sum"))
    extra = pd.DataFrame({
        "config": totals["config"], "tokens_per_s": totals["new_tokens"] / totals["wall_s"],
        "step_tokens": totals["fed"] / totals["steps"].clip(lower=1),
        "row_width": totals["row_fed"] / totals["steps"].clip(lower=1),
        "plain_steps": totals["plain"] / totals["steps"].clip(lower=1),
        "draft_nodes": totals["nodes"] / totals["steady"].clip(lower=1),
        "rows_identical": totals["identical"] / totals["rows"]}).reset_index()
    out = out.merge(extra, on=keys, how="left")
    first = [*keys, "config", "batches"]
    return out[first + [c for c in out.columns if c not in first]]


def step_width_quantiles(df: pd.DataFrame, quantiles: Sequence[float] = (0.1, 0.5, 0.9)) -> pd.DataFrame:
    """Per (prompt_set, batch_size, method): the quantiles of the tokens computed per forward over every forward after
    the prefill (columns q10, q50, q90 for the defaults) and the forwards counted."""
    rows = []
    for (name, size, method), part in df.groupby(["prompt_set", "batch_size", "method"], sort=False):
        widths = pd.Series([w for widths in part["step_widths"] for w in widths], dtype=float)
        rows.append({"prompt_set": name, "batch_size": size, "method": method, "forwards": len(widths),
                     **{f"q{round(100 * q)}": widths.quantile(q) for q in quantiles}})
    return pd.DataFrame(rows)


def main(argv: Sequence[str] | None = None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(prog="python -m lab.harness.batched", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="embedded", help="'embedded', a local model folder or a Hub id")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--sets", default=",".join(SETS), help="comma-separated prompt sets")
    parser.add_argument("--n", type=int, default=16, help="prompts per set (at least the largest batch size)")
    parser.add_argument("--batch-sizes", default=",".join(map(str, BATCH_SIZES)), help="comma-separated")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--methods", default="auto", help="comma-separated: auto, auto:TASK ('' for none)")
    parser.add_argument("--config", action="append", default=[], metavar="LABEL",
                        help="a lade config label, e.g. 3,4,4 or merged/16/adaptive (repeatable)")
    parser.add_argument("--eos", action="store_true", help="stop rows at EOS (default: every row generates "
                        "--max-new-tokens)")
    parser.add_argument("--repeat-plain", action="store_true", help="run plain batched greedy twice per batch (an A/A "
                        "pair: the ratio the run's noise alone gives)")
    parser.add_argument("--repeats", type=int, default=None, help="runs of every method per batch (default "
                        "bench.REPEATS; a row: the median repeat; two or more add greedy's A/A row)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--out", type=Path, default=None, help="results file (.jsonl)")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    from lab.harness.models import load_model

    model, tokenizer = load_model(args.model, device=args.device, dtype=args.dtype)
    df = run_batched(model, tokenizer, args.sets.split(","), [int(b) for b in args.batch_sizes.split(",")],
                     [*(Method.parse(m) for m in args.methods.split(",") if m.strip()),
                      *(Method.from_label(c) for c in args.config)], args.n, args.max_new_tokens,
                     ignore_eos=not args.eos, repeat_plain=args.repeat_plain, repeats=args.repeats,
                     model_arg=args.model, threads=torch.get_num_threads())
    report(summarize_batches(df), df, args.out)
    return df


if __name__ == "__main__":
    main()
