"""Step compression vs number of ranks for lookahead parallelism, at a fixed window share per rank.

`compression_vs_ranks` launches `torchrun --standalone --nproc_per_node R -m lab.studies.parallel ...` once
per rank count (gloo on CPU, loopback only; NCCL on CUDA, where each rank loads the model once, on `cuda:LOCAL_RANK`,
in the requested dtype); the total window and guess set grow with R (W = R * window_share,
G = R * guess_share). A last row decodes the largest total window in one process, for reference: its
compression must equal the parallel one (the union of the ranks' shares is the single-process step), while
each rank feeds fewer tokens per step. Results: data/results/distributed_scaling.jsonl, each row with the provenance,
which distributed_scaling.jsonl.provenance.json beside it also holds (as every results file's).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist

from lab.harness.models import load_model
from lab.harness.paths import REPO
from lab.harness.prompts import encode_prompt, load_prompts
from lab.harness.provenance import provenance
from lade.config import LookaheadConfig
from lade.distributed import generate

RESULTS = REPO / "data" / "results" / "distributed_scaling.jsonl"
PROMPT_SETS = ("mt_bench", "humaneval")


def compression_vs_ranks(ranks: tuple[int, ...] = (1, 2), window_share: int = 3, guess_share: int = 3,
                         ngram_size: int = 4, prompts_per_set: int = 2, max_new_tokens: int = 64,
                         model: str = "embedded", threads_per_rank: int = 1, out: Path | None = RESULTS,
                         recompute: bool = True, timeout_s: int = 3600, device: str = "cpu", dtype: str = "float32",
                         attn_implementation: str | None = None, prompt_format: str = "auto") -> list[dict]:
    """One row per rank count, plus the one-process reference row; writes `out` unless it is None.
    threads_per_rank: torch threads of each rank (1 keeps rank counts comparable on a small CPU).
    device: "cpu" (gloo) or "cuda" (NCCL, one GPU per rank: needs as many GPUs as the largest rank count).
    With recompute=False, reads the rows back from `out` instead of running anything."""
    if not recompute:
        return [json.loads(line) for line in Path(out).read_text().splitlines() if line.strip()]
    gpus = torch.cuda.device_count() if _backend(device) == "nccl" else None
    if gpus is not None and max(ranks) > gpus:
        raise ValueError(f"lookahead parallelism with {max(ranks)} ranks on CUDA needs {max(ranks)} GPUs "
                         f"(one per rank), this machine has {gpus}: lower `parallel_ranks`")
    widest = max(ranks)
    runs = [(r, r * window_share, r * guess_share) for r in ranks] + [(1, widest * window_share, widest * guess_share)]
    options = {"--model": model, "--device": device, "--dtype": dtype, "--prompt-format": prompt_format,
               "--attn": attn_implementation or ""}
    rows = [_launch(r, w, g, ngram_size, prompts_per_set, max_new_tokens, options, threads_per_rank, timeout_s)
            for r, w, g in runs]
    rows[-1]["label"] = "one process, widest total window (reference)"
    for row in rows:
        row["same_output_as_first_row"] = row["output_digest"] == rows[0]["output_digest"]
    record = provenance(ranks=list(ranks), window_share=window_share, guess_share=guess_share, ngram_size=ngram_size,
                        prompt_sets=list(PROMPT_SETS), prompts_per_set=prompts_per_set, max_new_tokens=max_new_tokens,
                        model=model, threads_per_rank=threads_per_rank, backend=_backend(device), device_arg=device,
                        dtype=dtype, attn_implementation=attn_implementation, prompt_format=prompt_format,
                        launcher="torchrun --standalone")
    rows = [{**row, "provenance": record} for row in rows]
    if out is not None:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text("".join(json.dumps(row) + "\n" for row in rows))
        Path(f"{out}.provenance.json").write_text(json.dumps({"provenance": record}, indent=2, default=str))
    return rows


def _backend(device: str) -> str:
    return "nccl" if device.startswith("cuda") else "gloo"


def _launch(ranks: int, window: int, guess: int, ngram: int, prompts_per_set: int, max_new_tokens: int,
            options: dict[str, str], threads: int, timeout_s: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks),
               "-m", "lab.studies.parallel", "--window", str(window), "--guess", str(guess), "--ngram", str(ngram),
               "--prompts-per-set", str(prompts_per_set), "--max-new-tokens", str(max_new_tokens), "--out", tmp,
               *(x for flag, value in options.items() for x in (flag, value))]
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), GLOO_SOCKET_IFNAME="lo",
                   PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
        run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
        if run.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
        per_rank = [json.loads((Path(tmp) / f"rank{r}.json").read_text()) for r in range(ranks)]
    digests = {p["output_digest"] for p in per_rank}
    if len(digests) != 1:
        raise RuntimeError(f"ranks emitted different sequences with R={ranks}: {per_rank}")
    first = per_rank[0]
    return {
        "label": f"{ranks} rank(s)", "ranks": ranks, "window_size": window, "guess_set_size": guess,
        "ngram_size": ngram, "window_columns_per_rank": -(-window // ranks),
        "compression": first["new_tokens"] / first["steps"], "new_tokens": first["new_tokens"], "steps": first["steps"],
        # a step waits for the slowest rank: the largest per-rank share is the step's work
        "step_tokens_per_rank": max(p["mean_step_tokens"] for p in per_rank),
        "refed_tokens_per_step": max(p["refed_tokens"] for p in per_rank) / first["steps"],
        "total_time_s": max(p["total_time_s"] for p in per_rank),
        "threads_per_rank": per_rank[0]["threads"], "output_digest": first["output_digest"],
    }


def _worker(args: argparse.Namespace) -> None:
    """One rank: load the model once on this rank's device (cuda:LOCAL_RANK under NCCL) in the requested dtype, decode
    the first prompts of each set with lade.distributed; write this rank's totals."""
    device = args.device
    if _backend(device) == "nccl":
        device = f"cuda:{int(os.environ['LOCAL_RANK'])}"
        torch.cuda.set_device(device)
    dist.init_process_group(_backend(args.device), timeout=datetime.timedelta(seconds=600))
    rank = dist.get_rank()
    model, tokenizer = load_model(args.model, device=device, dtype=args.dtype,
                                  attn_implementation=args.attn or None)
    config = LookaheadConfig(window_size=args.window, ngram_size=args.ngram, guess_set_size=args.guess)
    digest, steps, new_tokens, step_tokens, refed, seconds = hashlib.sha256(), 0, 0, [], 0, 0.0
    for name in PROMPT_SETS:
        for row in load_prompts(name, args.prompts_per_set):
            prompt = encode_prompt(tokenizer, row["prompt"], name, args.prompt_format)
            ids, mask = prompt.input_ids.to(model.device), prompt.attention_mask.to(model.device)
            out, stats = generate(model, ids, config, attention_mask=mask, return_stats=True, do_sample=False,
                                  max_new_tokens=args.max_new_tokens)
            digest.update(out.cpu().numpy().tobytes())
            # the prefill (stats step 0) is the same single forward in every run: count steady steps only
            steps, new_tokens = steps + stats.steps - 1, new_tokens + stats.new_tokens - stats.accepted_per_step[0]
            step_tokens += stats.step_tokens
            refed, seconds = refed + stats.refed_tokens, seconds + stats.total_time_s
    result = {"steps": steps, "new_tokens": new_tokens, "mean_step_tokens": sum(step_tokens) / max(len(step_tokens), 1),
              "refed_tokens": refed, "total_time_s": seconds, "threads": torch.get_num_threads(),
              "output_digest": digest.hexdigest()}
    (Path(args.out) / f"rank{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description="one rank of lab.studies.parallel.compression_vs_ranks (run by torchrun)")
    for flag in ("--window", "--guess", "--ngram", "--prompts-per-set", "--max-new-tokens"):
        parser.add_argument(flag, type=int, required=True)
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--device", default="cpu", help="cpu (gloo) or cuda (NCCL: rank r on cuda:LOCAL_RANK)")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--attn", default="", help="attn_implementation ('' for transformers' default)")
    parser.add_argument("--prompt-format", default="auto")
    parser.add_argument("--out", required=True)
    _worker(parser.parse_args())
