"""Running a notebook's models in turn: load each spec model (the spec's device, dtype, attention), benchmark it on
the datasets it runs with its methods, free it; one table of rows with a `model` column for all of them."""

from __future__ import annotations

import gc
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import pandas as pd
import torch

from lab.harness.bench import run_benchmark
from lab.harness.methods import Method, parse_config
from lab.harness.models import Weights, load_model
from lab.harness.provenance import provenance


class SpecModel(Protocol):
    """A model of an experiment spec as the runners read it (lab.pipeline.specs.ModelEntry is one)."""

    name: str
    path: str
    configs: tuple[str, ...] | None
    prompt_format: str | None
    device_map: str | None

    def runs_on(self, dataset: str) -> bool: ...

    def weights(self) -> Weights: ...

    def to_dict(self) -> dict[str, Any]: ...


def methods_for(entry: SpecModel, baselines: Sequence[str] = ()) -> list[Method]:
    """Plain greedy, the entry's lookahead configs, then the baselines (Method.parse strings), without repeats."""
    methods = [Method.greedy()] + [Method.from_key(parse_config(c)) for c in entry.configs or ()]
    methods += [Method.parse(b) for b in baselines]
    return list({m.name: m for m in methods}.values())


def headline_for(baselines: Sequence[str], n_prompts: int | Mapping[str, int],
                 headline_prompts: int | Mapping[str, int]) -> tuple[list[str], int | dict[str, int] | None]:
    """(headline, headline_prompts) for benchmark_models: lade-auto (with greedy) when `auto` is among the baselines,
    on `headline_prompts` per set but never fewer than every method runs (`n_prompts`); ([], None) without auto."""
    if "auto" not in baselines:
        return [], None
    if not isinstance(n_prompts, Mapping):
        if isinstance(headline_prompts, Mapping):
            raise ValueError("headline_prompts per set need n_prompts per set too: give both as {set: count}")
        return [Method.auto().name], max(headline_prompts, n_prompts)
    wanted = headline_prompts if isinstance(headline_prompts, Mapping) else dict.fromkeys(n_prompts, headline_prompts)
    return [Method.auto().name], {name: max(wanted.get(name, 0), count) for name, count in n_prompts.items()}


def load_entry(entry: SpecModel, device: str, dtype: str, attn_implementation: str | None = None):
    """(model, tokenizer) of a spec entry, from wherever its weights are (lab.harness.models.locate_weights)."""
    return load_model(entry.weights().source, device=device, dtype=dtype, attn_implementation=attn_implementation,
                      device_map=entry.device_map)


def benchmark_models(entries: Sequence[SpecModel], datasets: Sequence[str], baselines: Sequence[str] = (), *,
                     device: str, dtype: str, attn_implementation: str | None = None,
                     n_prompts: int | Mapping[str, int] = 10, max_new_tokens: int = 128,
                     methods: Sequence[Method] | None = None, ignore_eos: bool = False,
                     headline: Sequence[str] = (), headline_prompts: int | Mapping[str, int] | None = None,
                     num_beams: int = 1, repeats: int | None = None, **provenance_params: Any) -> pd.DataFrame:
    """For each entry in turn: load it, run_benchmark on the `datasets` it runs (entry.datasets) with `methods`, or
    else methods_for(entry, baselines), in its prompt format; free it. Rows of all models, provenance in attrs.
    headline, headline_prompts: as run_benchmark's (methods that also run more prompts); num_beams: as run_benchmark's
    (beam search, paired with plain beam search); repeats: run_benchmark's (None: bench.REPEATS)."""
    tables, per_model = [], {}
    for entry in entries:
        sets = [d for d in datasets if entry.runs_on(d)]
        if not sets:
            continue
        model, tokenizer = load_entry(entry, device, dtype, attn_implementation)
        print(f"{entry.name}: {sum(p.numel() for p in model.parameters()) / 1e6:.0f}M parameters, {model.dtype}, "
              f"{model.device}; {', '.join(sets)}; prompts {entry.prompt_format}")
        rows = run_benchmark(model, tokenizer, sets, methods if methods is not None else methods_for(entry, baselines),
                             max_new_tokens=max_new_tokens, n_prompts=n_prompts, ignore_eos=ignore_eos,
                             headline=headline, headline_prompts=headline_prompts, num_beams=num_beams,
                             repeats=repeats, prompt_format=entry.prompt_format, model_name=entry.name,
                             model_arg=entry.path)
        per_model[entry.name] = rows.attrs["provenance"]["params"] | {"device": rows.attrs["provenance"]["device"]}
        tables.append(rows)
        del model, tokenizer  # free it before the next model loads (a 70B and a 7B model rarely fit together)
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    if not tables:
        raise ValueError(f"none of the models {[e.name for e in entries]} runs on {list(datasets)} (their `datasets`)")
    df = pd.concat(tables, ignore_index=True)
    names = [e.name for e in entries if e.name in per_model]
    df.attrs["provenance"] = provenance(
        model_arg=", ".join(names), models=[e.to_dict() for e in entries if e.name in per_model],
        datasets=list(datasets),
        device_arg=device, dtype=dtype, attn_implementation=attn_implementation, max_new_tokens=max_new_tokens,
        n_prompts=n_prompts, headline=list(headline), headline_prompts=headline_prompts, ignore_eos=ignore_eos,
        num_beams=num_beams, per_model=per_model, **provenance_params)
    return df


def per_model(rows: pd.DataFrame, summarize) -> pd.DataFrame:
    """`summarize` (e.g. experiments.speedup_summary) applied to each model's rows, with a `model` column."""
    parts = [summarize(group).assign(model=name) for name, group in rows.groupby("model", sort=False)]
    return pd.concat(parts, ignore_index=True)
