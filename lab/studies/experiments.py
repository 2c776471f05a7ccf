"""Experiment runners and analysis shared by the study modules of notebooks 01-06 (each study module exposes the ones
its notebook calls); every results file has a `<file>.provenance.json` beside it (`lab.harness.results.save_results`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch

from lab.harness.bench import checked_repeats, rotated, summarize
from lab.harness.methods import Method, parse_config
from lab.harness.paths import published
from lab.harness.prompts import encode_prompt, load_prompts
from lab.harness.provenance import model_record, provenance
from lab.harness.stats import aa_row, median_repeat, summarize_runs
from lab.harness.timing import progress_bar, timed_generate
from lade.config import LookaheadConfig

SAMPLING_COLUMNS = ("prompt_set", "prompt_id", "temperature", "method", "new_tokens", "wall_s", "tokens_per_s",
                    "forward_calls", "compression", "speedup", "wall_s_repeats", "reference_wall_s")
DISTRIBUTION_COLUMNS = ("sampler", "sample", "position", "token", "text")


def model_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def with_config_columns(df: pd.DataFrame) -> pd.DataFrame:
    """Add integer columns N, W, G of the lookahead config labelled in the `config` column (methods.parse_config;
    NaN for rows of other methods)."""
    out = df.copy()
    keys = [_lookahead_key(label) for label in out["config"].astype(str)]
    for i, name in enumerate(("N", "W", "G")):
        out[name] = pd.to_numeric(pd.Series([k[i] if k else float("nan") for k in keys], index=out.index))
    return out


def _lookahead_key(label: str) -> tuple[int, ...] | None:
    try:
        return parse_config(label)
    except ValueError:
        return None


def speedup_summary(df: pd.DataFrame) -> pd.DataFrame:
    """bench.summarize: speedup and compression with 95% intervals per (prompt_set, method)."""
    return summarize(df)


def published_speedups(dataset: str, model_prefix: str) -> pd.DataFrame:
    """Published A100 speedups of `dataset` for models whose name starts with `model_prefix` (speedups.csv)."""
    table = pd.read_csv(published("speedups"))
    rows = table[(table["dataset"] == dataset) & table["model"].str.startswith(model_prefix)
                 & (table["hardware"] == "A100") & table["speedup"].notna()].copy()
    rows["config"] = rows.apply(
        lambda r: "" if pd.isna(r["window_size"]) else
        f"{int(r['ngram_size'])},{int(r['window_size'])},{int(r['guess_set_size'])}", axis=1)
    return rows[["source", "model", "params_b", "dataset", "hardware", "n_gpus", "dtype", "config", "speedup",
                 "baseline_tok_s", "lade_tok_s"]].reset_index(drop=True)


def scaling_methods(ngram_sizes: Sequence[int], window_sizes: Sequence[int]) -> list[Method]:
    """Lookahead with G = W for every (N, W): the paper's scaling-law grid."""
    return [Method.lade(n, w, w) for n in ngram_sizes for w in window_sizes]


def scaling_table(df: pd.DataFrame, params: int) -> pd.DataFrame:
    """Per lookahead config (both prompt sets together): compression with its 95% interval, tokens fed per step,
    and per-step FLOPs = 2 x params x step tokens."""
    pooled = df.assign(prompt_id=df["prompt_set"] + "/" + df["prompt_id"].astype(str), prompt_set="all")
    summary = summarize(pooled)
    lade_rows = with_config_columns(summary[summary["config"] != ""])
    out = lade_rows[["N", "W", "G", "config", "prompts", "compression", "compression_low", "compression_high",
                     "step_tokens", "single_token_steps", "speedup", "speedup_low", "speedup_high"]].copy()
    out["step_flops"] = 2.0 * params * out["step_tokens"]
    return out.sort_values(["N", "W"]).reset_index(drop=True)


def log_slope(table: pd.DataFrame) -> pd.DataFrame:
    """Per N: least-squares slope of compression against log2(W) (the scaling law predicts a straight line)."""
    rows = []
    for n, group in table.groupby("N"):
        slope, intercept = np.polyfit(np.log2(group["W"]), group["compression"], 1)
        rows.append({"N": int(n), "compression_per_doubling_W": slope, "intercept": intercept})
    return pd.DataFrame(rows)


def _encoded(tokenizer, prompt: str, prompt_set: str, prompt_format: str, device) -> tuple[torch.Tensor, torch.Tensor]:
    encoded = encode_prompt(tokenizer, prompt, prompt_set, prompt_format)
    return encoded.input_ids.to(device), encoded.attention_mask.to(device)  # [1, T], [1, T]


SAMPLING_METHODS = ("plain", "lade", "lade+sampled-window")  # plain sampling; lade with an argmax / sampled window


def run_sampling(model, tokenizer, prompt_set: str | Sequence[str], temperatures: Sequence[float],
                 config: LookaheadConfig, n_prompts: int, max_new_tokens: int, seed: int = 0,
                 prompt_format: str = "auto", sampled_window: bool = False, repeats: int | None = None,
                 **provenance_params: Any) -> pd.DataFrame:
    """Plain sampling vs lookahead sampling at each temperature (top_k=0, top_p=1) on the first `n_prompts` of each
    prompt set: tokens/s, compression (rows: SAMPLING_COLUMNS). With `sampled_window`, lade with a sampled window
    (LookaheadConfig.sample_window) runs too.

    Each method first runs once untimed (16 tokens, the first prompt). Every run generates `max_new_tokens` (EOS
    ignored) so lengths match; the methods run side by side per prompt
    with the same seed, each `repeats` times (None: lab.harness.bench.REPEATS), the order rotating from run to run
    (lab.harness.bench.rotated); a row's times are its median repeat's, and with two or more repeats plain's A/A row
    (its first repeat against its second, lab.harness.stats.aa_row) follows each prompt's rows. Speedup is per
    prompt and temperature, a method's tokens/s over plain sampling's measured beside it. prompt_format:
    lab.harness.prompts.
    """
    repeats = checked_repeats(repeats)
    device = next(model.parameters()).device
    sets = [prompt_set] if isinstance(prompt_set, str) else list(prompt_set)
    prompts = [(name, str(r["id"]), *_encoded(tokenizer, r["prompt"], name, prompt_format, device))
               for name in sets for r in load_prompts(name, n_prompts)]
    methods = SAMPLING_METHODS if sampled_window else SAMPLING_METHODS[:2]
    if prompts and temperatures:  # one untimed warm-up of each method (as lab.harness.bench.run_benchmark's)
        warm = _sampling_kwargs(tokenizer, temperatures[0], min(16, max_new_tokens))
        for m in methods:
            _sampling_run(model, prompts[0][2], prompts[0][3], m, config, seed, warm)
    rows = []
    bar = progress_bar(total=len(temperatures) * len(prompts) * repeats, desc="sampling", unit="prompt run")
    for t_index, temperature in enumerate(temperatures):
        gen = _sampling_kwargs(tokenizer, temperature, max_new_tokens)
        for p_index, (name, prompt_id, ids, mask) in enumerate(prompts):
            run_seed = seed + 1000 * t_index + p_index
            runs: dict[str, list[dict[str, Any]]] = {m: [] for m in methods}
            for rep in range(repeats):
                for m in rotated(methods, p_index + rep):  # the same seed every repeat: the same tokens
                    runs[m].append(_sampling_run(model, ids, mask, m, config, run_seed, gen))
                bar.update()
            pair = {m: timed[median_repeat([r["wall_s"] for r in timed])] | {
                "wall_s_repeats": [r["wall_s"] for r in timed], "reference_wall_s": None} for m, timed in runs.items()}
            prompt_rows = [{"prompt_set": name, "prompt_id": prompt_id, "temperature": temperature, "method": m,
                            **pair[m], "speedup": pair[m]["tokens_per_s"] / pair["plain"]["tokens_per_s"]}
                           for m in methods]
            if repeats >= 2:
                prompt_rows.append(aa_row(prompt_rows[0]))  # sampling rows record no forward time
            rows += prompt_rows
    bar.close()
    df = pd.DataFrame(rows, columns=list(SAMPLING_COLUMNS))
    df.attrs["provenance"] = provenance(
        model=getattr(model.config, "_name_or_path", ""), prompt_set=",".join(sets), **model_record(model),
        temperatures=list(temperatures), config=config.to_dict(), methods=list(methods),
        n_prompts=n_prompts, max_new_tokens=max_new_tokens, seed=seed, prompt_format=prompt_format,
        repeats=repeats, **provenance_params)
    df.attrs["summary"] = summarize_runs(df, reference="plain", keys=("prompt_set", "temperature", "method")).to_dict(
        "records")  # speedup and compression with 95% intervals, saved beside the rows
    return df


def _sampling_kwargs(tokenizer, temperature: float, max_new_tokens: int) -> dict[str, Any]:
    """generate() arguments of a sampling run: pure temperature sampling (top_k=0, top_p=1), EOS ignored."""
    return dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0, max_new_tokens=max_new_tokens,
                eos_token_id=None, pad_token_id=tokenizer.pad_token_id)


def _sampling_run(model, ids: torch.Tensor, mask: torch.Tensor, method: str, config: LookaheadConfig, seed: int,
                  gen: dict[str, Any]) -> dict[str, Any]:
    """One seeded sampling run of `method` (SAMPLING_METHODS) -> its measured columns."""
    torch.manual_seed(seed)
    sampled = {"sample_window": True} if method == "lade+sampled-window" else {}
    lookahead = None if method == "plain" else LookaheadConfig(**{**config.to_dict(), "sampling_seed": seed, **sampled})
    run = timed_generate(model, ids, mask, lookahead, gen)
    new, wall, timer = run.new[0], run.wall, run.timer
    return {"new_tokens": int(new.numel()), "wall_s": wall, "tokens_per_s": new.numel() / wall,
            "forward_calls": timer.calls, "compression": new.numel() / max(timer.calls, 1)}


def sample_continuations(model, tokenizer, prompt: str, config: LookaheadConfig, temperature: float,
                         samples: int, new_tokens: int, seed: int = 0, prompt_format: str = "auto",
                         **provenance_params: Any) -> pd.DataFrame:
    """`samples` continuations of `new_tokens` tokens from plain sampling (two independent seed sets, the second
    one a noise floor) and from lookahead sampling; one row per (sampler, sample, position, token, its text)."""
    device = next(model.parameters()).device
    ids, mask = _encoded(tokenizer, prompt, "", prompt_format, device)
    gen = _sampling_kwargs(tokenizer, temperature, new_tokens)
    samplers = {"plain": (None, seed), "plain (independent seeds)": (None, seed + 10**6),
                "lade": (config, seed + 2 * 10**6)}
    rows, calls = [], {}
    bar = progress_bar(total=samples * len(samplers), desc="distribution", unit="sample")
    for name, (cfg, base) in samplers.items():
        calls[name] = 0
        for i in range(samples):
            torch.manual_seed(base + i)
            run_cfg = None if cfg is None else LookaheadConfig(**{**cfg.to_dict(), "sampling_seed": base + i})
            run = timed_generate(model, ids, mask, run_cfg, gen)
            new, timer = run.new[0], run.timer
            n_calls = timer.calls
            calls[name] += n_calls
            rows += [{"sampler": name, "sample": i, "position": pos, "token": int(tok),
                      "text": tokenizer.decode([int(tok)])} for pos, tok in enumerate(new.tolist())]
            bar.update()
    bar.close()
    df = pd.DataFrame(rows, columns=list(DISTRIBUTION_COLUMNS))
    df.attrs["provenance"] = provenance(
        model=getattr(model.config, "_name_or_path", ""), prompt=prompt, **model_record(model),
        temperature=temperature, samples=samples, new_tokens=new_tokens,
        config=config.to_dict(), seed=seed,
        compression={name: samples * new_tokens / max(c, 1) for name, c in calls.items()}, **provenance_params)
    return df


def total_variation(dist: pd.DataFrame, reference: str = "plain") -> pd.DataFrame:
    """Per position and sampler: total-variation distance of its empirical token distribution to `reference`'s."""
    freq = dist.groupby(["sampler", "position"])["token"].value_counts(normalize=True).rename("p").reset_index()
    ref = freq[freq["sampler"] == reference][["position", "token", "p"]]
    rows = []
    for (sampler, position), group in freq[freq["sampler"] != reference].groupby(["sampler", "position"]):
        merged = group[["token", "p"]].merge(ref[ref["position"] == position][["token", "p"]], on="token",
                                             how="outer", suffixes=("", "_ref")).fillna(0.0)
        rows.append({"sampler": sampler, "position": int(position),
                     "tv_distance": 0.5 * float((merged["p"] - merged["p_ref"]).abs().sum())})
    return pd.DataFrame(rows)


def ablation_methods(ngram_size: int = 5) -> dict[str, Method]:
    """Paper Table 3 analogue: label -> method. "prompt n-grams only" keeps the window minimal (W=1) and fills
    the pool from the prompt only; the lookahead rows use output n-grams only unless "+ prompt pool"."""
    n = ngram_size
    return {
        "prompt lookup (transformers)": Method.prompt_lookup(10),
        "prompt n-grams only (W=1, G=15)": Method.lade(n, 1, 15, pool_from_output=False),
        "lookahead W=30, G=1": Method.lade(n, 30, 1, pool_from_prompt=False),
        "lookahead W=15, G=15": Method.lade(n, 15, 15, pool_from_prompt=False),
        "lookahead W=15, G=15 + prompt pool": Method.lade(n, 15, 15),
    }


def ablation_table(df: pd.DataFrame, labels: Mapping[str, Method]) -> pd.DataFrame:
    """Reproduced ablation rows beside the published ones (data/published/ablation.csv, same order)."""
    names = {m.name: label for label, m in labels.items()}
    ours = speedup_summary(df)
    ours = ours[ours["method"].isin(names)].copy()
    ours["variant"] = ours["method"].map(names)
    paper = pd.read_csv(published("ablation")).dropna(subset=["speedup"])
    paper_variant = ["prompt n-grams only (W=1, G=15)", "lookahead W=30, G=1", "lookahead W=15, G=15",
                     "lookahead W=15, G=15 + prompt pool"]
    paper = paper.assign(variant=paper_variant[: len(paper)])
    table = ours.merge(paper[["variant", "speedup", "compression", "verified"]].rename(
        columns={"speedup": "published_speedup", "compression": "published_compression",
                 "verified": "published_verified"}), on="variant", how="left")
    table.attrs = dict(df.attrs)  # the provenance of the run it summarises
    return table
