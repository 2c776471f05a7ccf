"""The architecture sweep: lade against plain `generate` on a tiny random model of every generative model type
transformers ships (lab.studies.tiny_architectures), each case classified

- identical: the same tokens as plain generate (greedy, beam search), or a sampled run that completed;
- near-tie: tokens differ first where plain decoding's top-2 logits are within NEAR_TIE (fp32 rounding decides);
- refused: a clear error before any forward of the model (the message says why and what to do);
- wrong: tokens differ where the top-2 gap is not a near-tie; crash: any other error;
- not buildable: the type "needs extra inputs" or "needs an extra package", has "no token generate", hits a
  "transformers bug" in plain generate, or "cannot be built at tiny size" (lab.studies.tiny_architectures' limit).

    python -m lab.studies.architecture_sweep --out data/results/experiments/architectures/sweep.jsonl
        [--only llama,gpt2] [--fast] [--jobs 2] [--resume] [--doc docs/architectures.md]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from contextlib import nullcontext
from pathlib import Path

import pandas as pd
import torch

from lab.harness.paths import REPO

RESULTS = REPO / "data/results/experiments/architectures/sweep.jsonl"
DOC = REPO / "docs/architectures.md"
NEW_TOKENS, PROMPT_LENGTH, NEAR_TIE = 20, 16, 1e-3
CASES = ("5,4,5", "3,3,3", "auto", "sample", "beams 3,3,3")
FAST = ("llama", "gpt2", "gpt_neo", "gptj", "opt", "bloom", "falcon", "mistral", "gemma2", "qwen2", "phi", "bart",
        "t5", "imagegpt", "kosmos-2.5", "llava")
PROBLEMS = ("wrong", "crash")


def prompt(vocab: int) -> torch.Tensor:
    """[1, PROMPT_LENGTH] ids in [3, vocab) whose first quarter repeats at the end (n-grams for the prompt pool)."""
    ids = torch.randint(3, vocab, (1, PROMPT_LENGTH), generator=torch.Generator().manual_seed(0))
    ids[0, -PROMPT_LENGTH // 4:] = ids[0, : PROMPT_LENGTH // 4]
    return ids


def case_arguments(case: str) -> dict:
    """lade.generate's keywords for one case (besides the shared greedy ones)."""
    import lade

    if case == "auto":
        return dict(lookahead_config="auto")
    if case == "sample":
        return dict(lookahead_config=lade.LookaheadConfig(window_size=3, ngram_size=3, guess_set_size=3,
                                                          sampling_seed=0), do_sample=True, top_k=20)
    beams = case.startswith("beams ")
    w, n, g = (int(v) for v in case.removeprefix("beams ").split(","))
    return dict(lookahead_config=lade.LookaheadConfig(window_size=w, ngram_size=n, guess_set_size=g),
                num_beams=3 if beams else 1)


def first_difference(expected: torch.Tensor, got: torch.Tensor, start: int) -> int | None:
    """Index of the first new token where the two [1, S] sequences differ (None if they are equal)."""
    if got.shape == expected.shape and torch.equal(got, expected):
        return None
    if got.shape[2:] != expected.shape[2:]:  # per-token codes of another shape (audio codebooks): differs at once
        return 0
    width = min(got.shape[1], expected.shape[1])
    differ = (got[0, :width] != expected[0, :width]).nonzero()
    return (int(differ[0]) if len(differ) else width) - start


def top2_gap(logits: torch.Tensor) -> float:
    """[V] logits -> the gap between the largest two."""
    top = logits.float().topk(2).values
    return float(top[0] - top[1])


class Forwards:
    """Counts the model's forwards while installed (refusals must come before the first)."""

    def __init__(self, model) -> None:
        self.count = 0
        self.handle = model.register_forward_pre_hook(self._hook)

    def _hook(self, *_) -> None:
        self.count += 1


def run_case(model, case: str, ids: torch.Tensor, plain: dict) -> dict:
    """One lade call against plain generate's outputs `plain` ({"greedy": output, "beams": sequences})."""
    import lade

    greedy = dict(max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None, pad_token_id=0)
    forwards = Forwards(model)
    try:
        out = lade.generate(model, ids, **{**greedy, **case_arguments(case)})
    except Exception as error:  # noqa: BLE001 - every failure is classified
        refused = forwards.count == 0 and isinstance(error, (ValueError, ImportError))
        return dict(status="refused" if refused else "crash", detail=f"{type(error).__name__}: {error}"[:600])
    finally:
        forwards.handle.remove()
    if case == "sample":
        return dict(status="identical" if out.shape == plain["greedy"].sequences.shape else "wrong",
                    detail="sampled (lossless in distribution, not token-equal); ran to length")
    expected = plain["beams"] if case.startswith("beams") else plain["greedy"].sequences
    index = first_difference(expected, out, ids.shape[1])
    if index is None:
        return dict(status="identical", detail="")
    if case.startswith("beams") or index >= len(plain["greedy"].logits):
        return dict(status="wrong", detail=f"first differs at new token {index}", first_difference=index)
    gap = top2_gap(plain["greedy"].logits[index][0])
    return dict(status="near-tie" if gap < NEAR_TIE else "wrong", first_difference=index, gap=gap,
                detail=f"first differs at new token {index}, plain top-2 gap {gap:.2e}")


def sweep_type(model_type: str, class_name: str) -> list[dict]:
    """Every case of one model type (or one row saying why it could not be built or run)."""
    from lab.studies.tiny_architectures import NotBuildable, build, prompt_vocab
    from lab.studies.tiny_overrides import UNRUNNABLE

    base = dict(model_type=model_type, model_class=class_name)
    start = time.perf_counter()
    try:
        model = build(model_type, class_name)
    except NotBuildable as error:
        return [dict(base, case="build", status="not buildable", detail=str(error))]
    try:
        ids = prompt(prompt_vocab(model))
        kwargs = dict(max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None, pad_token_id=0,
                      attention_mask=torch.ones_like(ids))
        with torch.inference_mode():
            plain = dict(greedy=model.generate(ids, return_dict_in_generate=True, output_logits=True, **kwargs))
    except Exception as error:  # noqa: BLE001 - plain generate needs more than input_ids
        why = UNRUNNABLE.get(model_type, "cannot be built at tiny size: plain generate from input_ids alone fails")
        return [dict(base, case="plain generate", status="not buildable",
                     detail=f"{why} ({type(error).__name__}: {error})"[:600])]
    try:
        with torch.inference_mode():
            plain["beams"] = model.generate(ids, num_beams=3, **kwargs)
    except Exception as error:  # noqa: BLE001 - some types generate greedily or by sampling only
        plain["beams"] = f"plain generate refuses beam search ({type(error).__name__}: {error})"[:600]
    rows = [dict(base, case=case, **(dict(status="not buildable", detail=plain["beams"])
                                      if case.startswith("beams") and isinstance(plain["beams"], str)
                                      else run_case(model, case, ids, plain))) for case in CASES]
    seconds = time.perf_counter() - start
    return [dict(row, seconds=round(seconds, 2)) for row in rows]


def _sweep_one(item: tuple[str, str]) -> list[dict]:
    torch.set_num_threads(1)
    return sweep_type(*item)


def sweep(types: dict[str, str], jobs: int = 1, partial: Path | None = None) -> pd.DataFrame:
    """Rows of every case of every type in `types` (model type -> class name), `jobs` types at a time; each type's
    rows are also appended to `partial` (JSON lines) as it finishes, so an interrupted sweep can resume."""
    os.environ.setdefault("LADE_CACHE", tempfile.mkdtemp(prefix="lade-sweep-"))  # "auto" profiles stay out of the way
    items, found = list(types.items()), []
    with ProcessPoolExecutor(jobs) if jobs > 1 else nullcontext() as pool:
        for rows in (pool.map(_sweep_one, items) if pool else map(lambda item: sweep_type(*item), items)):
            found += rows
            if partial is not None:
                with partial.open("a") as out:
                    out.writelines(json.dumps(row, default=str) + "\n" for row in rows)
    return pd.DataFrame(found)


def verdict(group: pd.DataFrame) -> tuple[str, str]:
    """(verdict, why) of one model type's rows: supported / refused / not buildable / wrong / crash / partial."""
    statuses = set(group.status)
    for problem in PROBLEMS:
        if problem in statuses:
            bad = group[group.status == problem].iloc[0]
            return problem, f"{bad.case}: {bad.detail}"
    if statuses == {"not buildable"}:  # the detail starts with why: extra inputs, extra package, bug, tiny size
        kind, _, why = group.detail.iloc[0].partition(": ")
        return kind, why
    group = group[group.status != "not buildable"]  # a case plain generate cannot run (beam search on some types)
    if set(group.status) <= {"identical", "near-tie"}:
        return "supported", ""
    refused = group[group.status == "refused"]
    why = refused.detail.iloc[0].split(": ", 1)[-1]
    kind = "refused" if len(refused) == len(group) else f"partly refused ({', '.join(refused.case)})"
    return kind, why


def table(df: pd.DataFrame) -> str:
    """The docs table: one line per model type with its verdict and, for refusals, lade's reason."""
    lines = ["| model type | class | verdict | why |", "|---|---|---|---|"]
    for model_type, group in df.groupby("model_type", sort=True):
        kind, why = verdict(group)
        why = why.replace("|", "/").replace("\n", " ")
        lines.append(f"| {model_type} | {group.model_class.iloc[0]} | {kind} | {why[:240]} |")
    return "\n".join(lines)


def render_doc(path: Path = RESULTS) -> str:
    """docs/architectures.md, generated from the sweep's results file."""
    from lab.harness.results import load_results

    df = load_results(path)
    counts = df.groupby("model_type").apply(lambda g: verdict(g)[0], include_groups=False).value_counts()
    summary = ", ".join(f"{count} {kind}" for kind, count in counts.items())
    prov = df.attrs
    return "\n".join([
        "# Architectures: what lade decodes, refuses, and why",
        "",
        "Generated by `python -m lab.studies.architecture_sweep --doc docs/architectures.md` from "
        f"`{Path(path).resolve().relative_to(REPO)}` (commit {str(prov.get('git_commit'))[:10]}, transformers "
        f"{prov.get('packages', {}).get('transformers')}). Each model type is a tiny random model built from its "
        f"config; lade ({', '.join(CASES)}) is compared with plain `generate` over {NEW_TOKENS} new tokens, EOS off. "
        "\"supported\": every case equal to plain generate (sampling: completed); \"refused\": lade raises a clear "
        "error before any forward; the other verdicts say why a type could not be compared: it \"needs extra inputs\" "
        "or \"needs an extra package\", has \"no token generate\", hits a \"transformers bug\" in plain generate, or "
        "\"cannot be built at tiny size\" (the sweep's config shrinking does not satisfy that config).",
        "",
        f"Types: {summary}.",
        "",
        table(df),
        "",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lab.studies.architecture_sweep",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=RESULTS, help="results file (.jsonl), provenance beside it")
    parser.add_argument("--only", default="", help="comma-separated model types (default: every generative type)")
    parser.add_argument("--fast", action="store_true", help="only the fast slice (FAST)")
    parser.add_argument("--jobs", type=int, default=1, help="model types swept at once (processes)")
    parser.add_argument("--resume", action="store_true", help="keep --out's rows, sweep only the types it lacks")
    parser.add_argument("--doc", type=Path, help="also write the docs table generated from --out here")
    args = parser.parse_args(argv)
    from lab.harness.provenance import provenance
    from lab.harness.results import load_results, save_results
    from lab.studies.tiny_architectures import generative_types

    types = generative_types()
    wanted = [t for t in args.only.split(",") if t] or (list(FAST) if args.fast else list(types))
    unknown = sorted(set(wanted) - set(types))
    if unknown:
        parser.error(f"not generative model types of this transformers: {', '.join(unknown)}")
    partial = args.out.with_name(args.out.name + ".partial")  # rows of types swept so far, until the file is saved
    partial.parent.mkdir(parents=True, exist_ok=True)
    kept = load_results(args.out) if args.resume and args.out.exists() else pd.DataFrame()
    if args.resume and partial.exists():
        kept = pd.concat([kept, pd.read_json(partial, lines=True)], ignore_index=True)
    elif partial.exists():
        partial.unlink()
    done = set(kept.model_type) if len(kept) else set()
    record = provenance(command=" ".join(["python -m lab.studies.architecture_sweep", *(argv or sys.argv[1:])]),
                        cases=list(CASES), new_tokens=NEW_TOKENS, near_tie=NEAR_TIE)  # the code that runs: as it starts
    start = time.perf_counter()
    new = sweep({t: types[t] for t in wanted if t not in done}, args.jobs, partial)
    df = pd.concat([kept, new], ignore_index=True) if len(kept) else new
    df.attrs = dict(record, params=dict(record["params"], seconds=round(time.perf_counter() - start, 1)))
    save_results(df.sort_values(["model_type", "case"], kind="stable"), args.out)
    partial.unlink(missing_ok=True)
    if args.doc:
        args.doc.write_text(render_doc(args.out))
    bad = df[df.status.isin(PROBLEMS)]
    print(df.groupby("status").size().to_string())
    print(bad[["model_type", "case", "status", "detail"]].to_string() if len(bad) else "no wrong output, no crash")
    return 1 if len(bad) else 0


if __name__ == "__main__":
    sys.exit(main())
