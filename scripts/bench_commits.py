"""Before/after a refactor: the same prompts and methods decoded by two checkouts of lade, request by request.

    python scripts/bench_commits.py BEFORE_CHECKOUT AFTER_CHECKOUT [--n 4] [--tokens 96] [--methods M,...]
        [--out rows.json]

Methods: plain greedy, a fixed config, "auto" on one prompt, "auto" on a left-padded batch of 4 prompts (the
prompt and the next three, cyclically) and "auto" beam search with 4 beams.

Each checkout runs in its own worker process (one torch thread, linear layers packed, the embedded model); the
coordinator sends every (prompt, method) to both, alternating which goes first, and waits for each answer before
the next request, so the two never run at once and share the machine's state. It prints each pair's wall times,
whether their outputs are identical, and per method the after/before wall-time ratio per prompt with its median.
Make a checkout of a commit with `git worktree add --detach DIR COMMIT`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
METHODS = ("greedy", "4,5,5", "auto", "auto-batch4", "auto-beams4")
BATCH, BEAMS = 4, 4


def worker(model_path: str) -> None:
    """Answer json requests {prompts, config, n} on stdin with {wall, tokens, out} on stdout (config: a METHODS
    entry; a batch method decodes every prompt, the others the first)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import lade
    from lade.cpu_linear import pack_cpu_linears

    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(model_path)
    model = pack_cpu_linears(AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval())
    print(json.dumps({"ready": lade.__file__}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        method, prompts = req["config"], req["prompts"] if req["config"] == "auto-batch4" else req["prompts"][:1]
        rows = [tok.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True,
                                        return_tensors="pt", return_dict=True)["input_ids"][0] for p in prompts]
        ids, mask = lade.left_pad(rows, tok.pad_token_id if tok.pad_token_id is not None else 0)  # [B, T]
        kw = dict(attention_mask=mask, max_new_tokens=req["n"], do_sample=False,
                  num_beams=BEAMS if method == "auto-beams4" else 1)
        start = time.perf_counter()
        if method == "greedy":
            out = model.generate(ids, **kw)
        else:
            config = lade.LookaheadConfig.from_label(method) if method[0].isdigit() else "auto"
            out = lade.generate(model, ids, config, **kw)
        wall = time.perf_counter() - start
        new = out[:, ids.shape[1]:].tolist()
        print(json.dumps({"wall": wall, "tokens": sum(map(len, new)), "out": new}), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path)
    parser.add_argument("--n", type=int, default=4, help="prompts per set (MT-Bench and HumanEval)")
    parser.add_argument("--tokens", type=int, default=96)
    parser.add_argument("--methods", default=",".join(METHODS), help=f"comma-separated, of {','.join(METHODS)}")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    methods = args.methods.split(",")
    if not methods or any(m not in METHODS for m in methods):
        parser.error(f"--methods takes a comma-separated list of {', '.join(METHODS)}, got {args.methods!r}")
    model = str(Path(os.environ.get("LADE_CACHE", REPO / ".cache")) / "models" / "SmolLM2-135M-Instruct")

    def start(root: Path) -> subprocess.Popen:
        env = dict(os.environ, PYTHONPATH=str(root), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
        proc = subprocess.Popen([sys.executable, __file__, "--worker", model], cwd=root, env=env, text=True,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        print(root, proc.stdout.readline().strip(), flush=True)
        return proc

    def ask(proc: subprocess.Popen, request: dict) -> dict:
        proc.stdin.write(json.dumps(request) + "\n")
        proc.stdin.flush()
        return json.loads(proc.stdout.readline())

    data = REPO / "data" / "prompts"
    prompts = [json.loads(line)["turns"][0] for line in (data / "mt_bench.jsonl").open()][: args.n]
    prompts += [json.loads(line)["prompt"] for line in (data / "humaneval.jsonl").open()][: args.n]
    workers = {"before": start(args.before), "after": start(args.after)}
    def batch_of(i: int) -> list[str]:
        return [prompts[(i + k) % len(prompts)] for k in range(BATCH)]

    for proc in workers.values():  # untimed warm-up (and "auto"'s latency profile, measured or cached)
        for method in methods:
            ask(proc, {"prompts": batch_of(0), "config": method, "n": 16})
    rows = []
    for i in range(len(prompts)):
        for j, method in enumerate(methods):
            order = ("before", "after") if (i + j) % 2 == 0 else ("after", "before")
            answers = {v: ask(workers[v], {"prompts": batch_of(i), "config": method, "n": args.tokens}) for v in order}
            same = answers["before"]["out"] == answers["after"]["out"]
            rows += [{"prompt": i, "method": method, "version": v, "same_output": same, "wall": answers[v]["wall"],
                      "tokens": answers[v]["tokens"]} for v in order]
            print(i, method, {v: round(answers[v]["wall"], 3) for v in order}, "same" if same else "DIFFERENT",
                  flush=True)
    for method in methods:
        walls = {v: [r["wall"] for r in rows if r["method"] == method and r["version"] == v] for v in workers}
        ratios = [a / b for a, b in zip(walls["after"], walls["before"])]
        print(f"{method}: after/before wall time per prompt {[round(r, 3) for r in ratios]}, median "
              f"{statistics.median(ratios):.3f}")
    if args.out is not None:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    if sys.argv[1:2] == ["--worker"]:
        worker(sys.argv[2])
    else:
        main()
