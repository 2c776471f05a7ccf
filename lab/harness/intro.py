"""The sentence of a notebook's introduction that names what its run did (methods, prompt sets with their prompt
counts, batch or corpus sizes, new tokens), generated from its results file like its Findings, so the prose cannot
name a method, set or size the run did not have."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd

from lab.harness.results import load_results


def listing(items: Iterable[object]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    words = [str(item) for item in items]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1] if words else "nothing"


def prompt_counts(rows: pd.DataFrame) -> dict[str, int]:
    """Prompts each set ran: distinct `prompt_id`s, or the ids of the batches' `prompt_ids` (batched rows)."""
    if "prompt_id" in rows:
        return rows.groupby("prompt_set", sort=False)["prompt_id"].nunique().to_dict()
    return {name: len({i for ids in group["prompt_ids"] for i in str(ids).split(",")})
            for name, group in rows.groupby("prompt_set", sort=False)}


def run_intro(path: Path, sizes: Sequence[tuple[str, Sequence[int]]] = ()) -> str:
    """'This run: METHODS on SET (n prompts), ...; SIZE NAME a, b; T new tokens per prompt.' from the results file at
    `path`; sizes: (what, values) pairs the study adds (batch sizes, corpus sizes)."""
    rows = load_results(path)
    params = rows.attrs.get("provenance", {}).get("params", {})
    methods = listing(f"`{m}`" for m in dict.fromkeys(rows["method"]))
    sets = listing(f"{name} ({n} prompt{'s' * (n != 1)})" for name, n in prompt_counts(rows).items())
    parts = [f"This run: {methods} on {sets}"]
    parts += [f"{what} {listing(values)}" for what, values in sizes]
    if "max_new_tokens" in params:
        parts.append(f"at most {params['max_new_tokens']} new tokens per prompt")
    return "; ".join(parts) + f" (from `{Path(path).name}`)."
