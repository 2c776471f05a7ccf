"""Benchmark runner: prompt sets x decoding methods -> tokens/s, compression, forward/host time, exactness.

Python API (used by the notebooks):

    from lab.harness.bench import run_benchmark, summarize
    from lab.harness.methods import Method
    from lab.harness.results import save_results
    df = run_benchmark(model, tok, prompt_sets=("mt_bench", "humaneval"),
                       methods=[Method.auto(), Method.lade(4, 5, 5), Method.prompt_lookup(10)],
                       max_new_tokens=128, n_prompts=10)
    print(summarize(df))            # speedup and compression with 95% intervals per prompt set and method
    save_results(df, "results/bench.jsonl")

CLI: `python -m lab.harness.bench --model embedded --sets mt_bench,humaneval --n 10 --max-new-tokens 128
--methods greedy,auto,pld --config 4,5,5 --threads 1 --out results/bench.jsonl` (`--config N,W,G`,
repeatable; `auto` = lade.cost's choice for the model and device, see lade.auto_config).

Methods run interleaved per prompt (their order rotates from prompt to prompt and from repeat to repeat) after
one untimed warm-up run of each, so they share the machine's state; plain greedy always runs, as the reference for
speed ratios and for exactness. Every method times each prompt `repeats` times (REPEATS by default); a row's times
are its median repeat's (`wall_s_repeats` keeps each one), and with two or more repeats the A/A row (method
`greedy (A/A)`: greedy's first repeat against its second on each prompt) measures what noise alone gives. Timings
are wall-clock on whatever else the machine is doing: `summarize` gives each speedup and compression with a 95%
percentile bootstrap interval over prompts (none below lab.harness.stats.MIN_INTERVAL_N prompts).

Results schema: one row per (prompt, method), columns ROW_COLUMNS; `df.attrs["provenance"]` holds
`lab.harness.provenance.provenance(...)` with the run's parameters and `df.attrs["summary"]` the run's `summarize`
(speedup and compression with 95% intervals), both written beside the rows by `save_results`.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from lab.harness.agreement import first_divergence
from lab.harness.methods import Method, measure_row_profiles, parse_config, reference_method
from lab.harness.prompts import EncodedPrompt, Prompt, encode_prompts, load_prompts
from lab.harness.provenance import model_record, provenance
from lab.harness.results import report
from lab.harness.stats import aa_row, median_repeat, summarize_runs
from lab.harness.timing import ForwardTimer, Timed, progress_bar, timed_generate

ROW_COLUMNS = {
    "model": "the model's label (a spec entry's name, else its folder or Hub id's last part)",
    "dtype": "the model's dtype (float32, float16, bfloat16)",
    "prompt_set": "name of the prompt set (mt_bench, humaneval, gsm8k, spec_bench:TASK, ...)",
    "prompt_id": "id of the prompt within its set",
    "prompt_format": "how the prompt was fed: chat (the tokenizer's chat template) or raw (lab.harness.prompts)",
    "prompt_text": "exactly the text that was tokenized",
    "method": "Method.name",
    "config": "'N,W,G' for lookahead methods (the resolved one for auto), '' otherwise",
    "prompt_tokens": "prompt length in tokens",
    "new_tokens": "tokens generated",
    "wall_s": "wall-clock time of the generate call (prefill included): the median repeat's (the A/A row: the "
              "reference's second repeat)",
    "wall_s_repeats": "wall-clock time of each repeat, in run order (the A/A row: the reference's)",
    "reference_wall_s": "the A/A row only: the reference's first repeat, its `speedup`'s reference (else empty)",
    "tokens_per_s": "new_tokens / wall_s",
    "forward_calls": "forward passes of the benchmarked model (prefill included)",
    "compression": "new_tokens / forward_calls (plain greedy: 1.0)",
    "step_tokens": "mean tokens fed per forward call after the prefill (plain greedy: 1.0)",
    "single_token_steps": "share of the forward calls after the prefill that fed one token (plain greedy: 1.0)",
    "forward_s": "time spent inside the model's forward (the median repeat's)",
    "host_share": "1 - forward_s / wall_s: share of time outside the model forward",
    "matches_greedy": "output token-for-token identical to the reference's (plain greedy; plain beam search, method "
                      "beam(k), in a beam-search run) with the same model and dtype on this prompt",
    "first_divergence": "first generated position where the output differs from the reference's; -1 if identical",
    "speedup": "tokens_per_s / the reference's tokens_per_s on the same prompt",
}


def time_generate(model, method: Method, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                  gen_kwargs: dict[str, Any], latency: Callable[[float], float] | None = None,
                  stats: bool = False) -> Timed:
    """One timed generate call of `method` (timing.timed_generate). latency: the latency model of a method that
    plans its steps (auto, or an adaptive config); stats: lade's per-row statistics too."""
    lookahead = method.lookahead if method.kind == "lade" else None
    plans = isinstance(lookahead, str) or bool(getattr(lookahead, "adaptive", False))
    extra = {"lookahead_latency": latency} if latency is not None and plans else {}
    return timed_generate(model, input_ids, attention_mask, lookahead,
                          {**gen_kwargs, **method.generate_kwargs, **extra}, stats)


def _row(prompt_set: str, prompt_id: str, prompt: EncodedPrompt, method: Method, new: torch.Tensor, wall: float,
         timer: ForwardTimer, forward_s: float) -> dict[str, Any]:
    """wall, forward_s: seconds of one generate call and of its forwards (the median repeat's)."""
    n = int(new.numel())
    return {
        "prompt_set": prompt_set, "prompt_id": prompt_id, "prompt_format": prompt.format, "prompt_text": prompt.text,
        "method": method.name, "config": method.config_label(), "prompt_tokens": prompt.input_ids.shape[1],
        "new_tokens": n, "wall_s": wall, "tokens_per_s": n / wall,
        "forward_calls": timer.calls, "compression": n / max(timer.calls, 1),
        "step_tokens": timer.step_tokens, "single_token_steps": timer.single_token_steps, "forward_s": forward_s,
        "host_share": max(0.0, 1.0 - forward_s / wall),
    }


def runs_headline_prompts(method: Method, headline: Sequence[str]) -> bool:
    """Whether `method` also runs the headline prompts: a headline method, or the reference (plain decoding)."""
    return method.kind == "greedy" or method.name in headline


def run_benchmark(
    model,
    tokenizer,
    prompt_sets: Sequence[str] = ("mt_bench", "humaneval"),
    methods: Sequence[Method] = (),
    max_new_tokens: int = 128,
    n_prompts: int | Mapping[str, int] = 10,
    ignore_eos: bool = False,
    warmup: bool = True,
    progress: bool = True,
    prompt_format: str = "auto",
    model_name: str | None = None,
    repeats: int | None = None,
    headline: Collection[str] = (),
    headline_prompts: int | Mapping[str, int] | None = None,
    num_beams: int = 1,
    split: str = "evaluation",
    skip: int = 0,
    **provenance_params: Any,
) -> pd.DataFrame:
    """Run every method on the first `n_prompts` prompts of each set; one row per (prompt, method).

    Plain greedy is added if missing (it is the reference); auto methods are resolved (latency measured or loaded
    from the cache) before any timing, except under beam search, where lade resolves "auto" per call (the untimed
    warm-up measures the latency). `ignore_eos=True` always generates `max_new_tokens`.
    n_prompts: one count for every set, or {set: count}. prompt_format: chat / raw / auto / reference
    (lab.harness.prompts.encode_prompt). model_name: the `model` column (default: the model's folder name).
    repeats: every method runs each prompt this many times (in a different rotation each time; None: REPEATS); a
    row's times are its median repeat's, and two or more add the reference's A/A row per prompt.
    headline / headline_prompts: the methods named in `headline` (with greedy, their
    reference) also run the prompts after the first `n_prompts`, up to `headline_prompts` per set (one count or
    {set: count}), so a headline speedup gets a narrow interval while the comparisons run on fewer prompts; every
    speedup is paired with greedy on the prompts its method ran. num_beams > 1: every method runs beam search with
    that many beams, and the reference is plain beam search (named beam(k)) instead of plain greedy. split: which
    prompts of each set (lab.harness.splits; "tuning" for what tunes lade). skip: leave out each set's first `skip`
    prompts (e.g. the earlier requests a corpus holds), counting from the one after them. Returns a DataFrame with
    ROW_COLUMNS; provenance in `df.attrs`.
    """
    # 1 validate (before any work), then resolve auto configs (latency measured or cached) before any timing
    methods = _checked_methods(methods, headline, headline_prompts, num_beams)
    repeats = checked_repeats(repeats)
    counts, widest = _prompt_counts(prompt_sets, n_prompts, headline_prompts)
    # beam search resolves "auto" itself (lade.beams prices each beam step), so it stays "auto:TASK" there
    methods = [m.resolved(model) for m in methods] if num_beams == 1 else methods
    measure_row_profiles(model, methods, [num_beams])  # one prompt's beams are a step's rows
    gen_kwargs: dict[str, Any] = {"do_sample": False, "max_new_tokens": max_new_tokens,
                                  "pad_token_id": tokenizer.pad_token_id or tokenizer.eos_token_id,
                                  "num_beams": num_beams}
    if ignore_eos:
        gen_kwargs["eos_token_id"] = None
    # 2 encode every prompt once, on the model's device
    if isinstance(skip, bool) or not isinstance(skip, int) or skip < 0:
        raise ValueError(f"skip must be a non-negative integer (prompts left out of each set), got {skip!r}")
    prompts = _encode(model, tokenizer, prompt_sets, counts, widest, prompt_format, split, skip)
    # 3 warm up every method untimed
    if warmup and prompts:
        for method in methods:
            time_generate(model, method, *prompts[0].ids, {**gen_kwargs, "max_new_tokens": min(16, max_new_tokens)})
    # 4 per prompt: its methods in a rotating order, 5 each row paired with greedy's on the same prompt
    name_or_path = getattr(model.config, "_name_or_path", "") or type(model).__name__
    label = {"model": model_name or Path(name_or_path).name, "dtype": str(model.dtype).removeprefix("torch.")}
    per_prompt = [methods if p.all_methods else [m for m in methods if runs_headline_prompts(m, headline)]
                  for p in prompts]
    bar = progress_bar(total=sum(map(len, per_prompt)) * repeats, show=progress, desc="bench", unit="run")
    rows: list[dict[str, Any]] = []
    for i, (prompt, these) in enumerate(zip(prompts, per_prompt)):
        runs = _rotated_runs(model, these, prompt, gen_kwargs, repeats, first=i, done=bar.update)
        rows += [label | row for row in _paired_rows(prompt, these, runs, repeats)]
    bar.close()
    # 6 record: rows, provenance and summary
    df = pd.DataFrame(rows, columns=list(ROW_COLUMNS))
    df.attrs["provenance"] = provenance(
        model=name_or_path, model_name=label["model"], **model_record(model),
        prompt_format=prompt_format, prompt_sets=list(prompt_sets), n_prompts=n_prompts,
        headline=list(headline), headline_prompts=headline_prompts,
        max_new_tokens=max_new_tokens, ignore_eos=ignore_eos, repeats=repeats, num_beams=num_beams, split=split,
        **({"skip": skip} if skip else {}),
        methods={m.name: m.config_label() for m in methods}, **provenance_params,
    )
    df.attrs["summary"] = summarize(df).to_dict("records")  # saved beside the rows with the provenance
    return df


REPEATS = 3  # timings of every (prompt, method) in a benchmark; their median is the row's time
QUICK_REPEATS = 2  # a --quick run's: the fewest that still give the A/A row


def repeats_for(quick: bool) -> int:
    """Timings per (prompt, method) of a notebook run: REPEATS, or QUICK_REPEATS in a --quick run."""
    return QUICK_REPEATS if quick else REPEATS


def checked_repeats(repeats: int | None) -> int:
    """`repeats` (None: REPEATS), refused unless a positive integer."""
    repeats = REPEATS if repeats is None else repeats
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be a positive integer (timings per prompt and method), got {repeats!r}")
    return repeats


def _checked_methods(methods: Sequence[Method], headline: Collection[str],
                     headline_prompts: int | Mapping[str, int] | None, num_beams: int = 1) -> list[Method]:
    """The reference first (plain greedy or plain beam search: every speedup's reference), then `methods`; names
    unique, headline methods among them, every method able to run `num_beams` beams."""
    if not isinstance(num_beams, int) or num_beams < 1:
        raise ValueError(f"num_beams must be a positive integer, got {num_beams!r}")
    if num_beams > 1 and (other := [m.name for m in methods if m.kind in ("prompt_lookup", "assisted")]):
        raise ValueError(f"methods {other} do not run beam search: drop them from a run with num_beams={num_beams}")
    methods = [Method.plain(num_beams)] + [m for m in methods if m.kind != "greedy"]
    if len({m.name for m in methods}) != len(methods):
        raise ValueError(f"method names must be unique, got {[m.name for m in methods]}")
    if unknown := set(headline) - {m.name for m in methods}:
        raise ValueError(f"headline methods {sorted(unknown)} are not among the methods {[m.name for m in methods]}")
    if (headline_prompts is None) != (not headline):
        raise ValueError("headline methods run headline_prompts prompts per set: give both (or neither), got headline="
                         f"{list(headline)}, headline_prompts={headline_prompts}")
    return methods


def _prompt_counts(prompt_sets: Sequence[str], n_prompts: int | Mapping[str, int],
                   headline_prompts: int | Mapping[str, int] | None) -> tuple[dict[str, int], dict[str, int]]:
    """(prompts every method runs, prompts the headline methods run) per set."""
    counts = _per_set(n_prompts, prompt_sets)
    widest = counts if headline_prompts is None else _per_set(headline_prompts, prompt_sets)
    if short := [name for name in prompt_sets if widest[name] < counts[name]]:
        raise ValueError(f"headline_prompts must be at least n_prompts (sets {short}): it adds prompts to the "
                         "headline methods")
    return counts, widest


def _encode(model, tokenizer, prompt_sets: Sequence[str], counts: Mapping[str, int], widest: Mapping[str, int],
            prompt_format: str, split: str = "evaluation", skip: int = 0) -> list[Prompt]:
    device = next(model.parameters()).device
    prompts = []
    for name in prompt_sets:
        rows = load_prompts(name, widest[name] + skip, split=split)
        if skip and len(rows) < widest[name] + skip:
            raise ValueError(f"{name} has {len(rows)} prompts in its {split} split: fewer than the {skip} skipped and "
                             f"{widest[name]} measured")
        prompts += encode_prompts(tokenizer, name, rows.select(range(skip, len(rows))), prompt_format, device,
                                  counts[name])
    return prompts


def _rotated_runs(model, methods: list[Method], prompt: Prompt, gen_kwargs: dict[str, Any], repeats: int,
                  first: int, done: Callable[[], Any]) -> dict[str, list[Timed]]:
    """Each method `repeats` times on the prompt, the order rotated by `first` + repeat (no method always first):
    method name -> its timed calls."""
    runs: dict[str, list] = {m.name: [] for m in methods}
    for rep in range(repeats):
        for method in rotated(methods, first + rep):
            runs[method.name].append(time_generate(model, method, *prompt.ids, gen_kwargs))
            done()
    return runs


def rotated(methods: Sequence[Method], turn: int) -> list[Method]:
    """`methods` in the order of run number `turn`: rotated by `turn`, so that no method always runs first."""
    shift = turn % len(methods)
    return [*methods[shift:], *methods[:shift]]


def _paired_rows(prompt: Prompt, methods: list[Method], runs: Mapping[str, list], repeats: int) -> list[dict]:
    """One row per method (times: its median repeat's, lab.harness.stats.median_repeat), with its divergence from
    and speedup over the reference
    (methods[0]: plain greedy or plain beam search); with two or more repeats, then the reference's A/A row
    (lab.harness.stats.aa_row: its first repeat against its second, with the second's forward time)."""
    outputs = {name: timed[0].new[0] for name, timed in runs.items()}
    rows = []
    for method in methods:
        timed = runs[method.name]
        walls = [t.wall for t in timed]
        median = timed[median_repeat(walls)]
        row = _row(prompt.set_name, prompt.prompt_id, prompt.encoded, method, outputs[method.name], median.wall,
                   median.timer, median.timer.seconds)
        rows.append(row | {"wall_s_repeats": walls, "reference_wall_s": None})
    reference = rows[0]
    for row in rows:
        row["first_divergence"] = first_divergence(outputs[row["method"]], outputs[reference["method"]])
        row["matches_greedy"] = row["first_divergence"] == -1
        row["speedup"] = row["tokens_per_s"] / reference["tokens_per_s"]
    if repeats >= 2:
        rows.append(aa_row(reference, runs[reference["method"]][1].timer.seconds))
    return rows


def _per_set(count: int | Mapping[str, int], prompt_sets: Sequence[str]) -> dict[str, int]:
    """One prompt count for every set, or {set: count} (every set named)."""
    if not isinstance(count, Mapping):
        return {name: count for name in prompt_sets}
    if missing := [name for name in prompt_sets if name not in count]:
        raise ValueError(f"prompt counts {dict(count)} name no count for the sets {missing}")
    return dict(count)


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    """Per (prompt_set, method), in order of appearance: speedup over plain greedy (ratio of total times; the A/A
    row: greedy's first repeats over its second) and compression (token-weighted) with 95% bootstrap intervals over
    prompts (lab.harness.stats), and totals-based
    tokens/s, tokens fed per step, share of one-token steps, host share, share of outputs identical to greedy."""
    out = summarize_runs(df, reference=reference_method(df["method"]))
    steps = (df["forward_calls"] - 1).clip(lower=0)  # forwards after the prefill
    totals = df.assign(fed=df["step_tokens"] * steps, steps=steps, single=df["single_token_steps"] * steps).groupby(
        ["prompt_set", "method"], sort=False).agg(
        config=("config", "first"), new_tokens=("new_tokens", "sum"), wall_s=("wall_s", "sum"),
        forward_s=("forward_s", "sum"), fed=("fed", "sum"), steps=("steps", "sum"), single=("single", "sum"),
        matches_greedy=("matches_greedy", "mean"))
    extra = pd.DataFrame({
        "config": totals["config"], "tokens_per_s": totals["new_tokens"] / totals["wall_s"],
        "step_tokens": totals["fed"] / totals["steps"].clip(lower=1),
        "single_token_steps": totals["single"] / totals["steps"].clip(lower=1),
        "host_share": 1.0 - totals["forward_s"] / totals["wall_s"], "matches_greedy": totals["matches_greedy"],
    }).reset_index()
    out = out.merge(extra, on=["prompt_set", "method"], how="left")
    first = ["prompt_set", "method", "config", "prompts"]
    return out[first + [c for c in out.columns if c not in first]]


def main(argv: Sequence[str] | None = None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(prog="python -m lab.harness.bench", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="embedded", help="'embedded', a local model folder or a Hub id")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--sets", default="mt_bench,humaneval", help="comma-separated prompt sets")
    parser.add_argument("--n", type=int, default=10, help="prompts per set")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--methods", default="greedy,auto,pld",
                        help="comma-separated: greedy, auto, auto:chat, auto:code, pld, pld:K")
    parser.add_argument("--config", action="append", default=[], metavar="N,W,G[,C,M]",
                        help="a fixed lookahead config: N,W,G or N,W,G,C,M with pool capacity and match tokens "
                             "(repeatable)")
    parser.add_argument("--prompt-format", default="auto", help="chat, raw, auto (chat if the tokenizer has a "
                        "template) or reference (as the reference implementation's evaluation scripts)")
    parser.add_argument("--ignore-eos", action="store_true", help="always generate --max-new-tokens")
    parser.add_argument("--no-warmup", action="store_true")
    parser.add_argument("--repeats", type=int, default=REPEATS, help="runs of every method per prompt (a row's "
                        "time: their median; two or more add greedy's A/A row)")
    parser.add_argument("--headline", default="", help="comma-separated method names (e.g. lade-auto) that also run "
                        "the prompts after the first --n, up to --headline-n per set")
    parser.add_argument("--headline-n", type=int, default=None, help="prompts per set of the --headline methods")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch CPU threads (1 is far steadier on a machine shared with other jobs)")
    parser.add_argument("--num-beams", type=int, default=1, help="beams of every method (> 1: beam search, paired "
                        "with plain beam search, named beam(k), instead of plain greedy)")
    parser.add_argument("--out", type=Path, default=None, help="results file (.jsonl or .csv)")
    args = parser.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)

    from lab.harness.models import load_model

    model, tokenizer = load_model(args.model, device=args.device, dtype=args.dtype)
    methods = [Method.parse(s) for s in args.methods.split(",") if s.strip()]
    methods += [Method.from_key(parse_config(c)) for c in args.config]
    df = run_benchmark(model, tokenizer, args.sets.split(","), methods, args.max_new_tokens, args.n,
                       ignore_eos=args.ignore_eos, warmup=not args.no_warmup, prompt_format=args.prompt_format,
                       repeats=args.repeats, headline=[h for h in args.headline.split(",") if h.strip()],
                       headline_prompts=args.headline_n, num_beams=args.num_beams, model_arg=args.model,
                       threads=torch.get_num_threads())
    report(summarize(df), df, args.out)
    return df


if __name__ == "__main__":
    main()
