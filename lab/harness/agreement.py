"""Agreement of lookahead output with plain greedy decoding in the same dtype.

In fp32 lade's greedy output equals plain greedy token for token, and the notebooks assert it. In fp16/bf16 a step
that feeds many tokens rounds differently from a one-token step, so at a near-tie the two can pick different tokens
and continue differently from there: that is measured, not asserted (per prompt: identical or not, and the first
position where the outputs differ), as the paper reports agreement for reduced precision.
"""

from __future__ import annotations

import pandas as pd
import torch

from lab.harness.methods import reference_method
from lab.harness.stats import aa_name

EXACT_DTYPES = ("float32", "float64")  # dtypes in which lookahead output must equal plain greedy


def first_divergence(output: torch.Tensor, reference: torch.Tensor) -> int:
    """Index of the first generated token where `output` [T] differs from `reference` [T'] (a length difference
    counts at the shorter length); -1 when they are identical."""
    n = min(len(output), len(reference))
    differ = (output[:n] != reference[:n]).nonzero()  # [k, 1]
    if len(differ):
        return int(differ[0, 0])
    return -1 if len(output) == len(reference) else n


def agreement_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Per (model, dtype, prompt_set, method) other than plain greedy (and its A/A row, plain greedy again): prompts,
    share of outputs identical to plain greedy, the first-divergence positions of the others (sorted) and their
    median."""
    reference = reference_method(rows["method"])
    others = rows[~rows["method"].isin([reference, aa_name(reference)])]
    out = []
    for keys, group in others.groupby(["model", "dtype", "prompt_set", "method"], sort=False):
        positions = sorted(int(p) for p in group["first_divergence"] if p >= 0)
        out.append(dict(zip(("model", "dtype", "prompt_set", "method"), keys), prompts=len(group),
                        identical=float(group["matches_greedy"].mean()), divergence_positions=positions,
                        median_divergence=float(pd.Series(positions).median()) if positions else None))
    return pd.DataFrame(out, columns=["model", "dtype", "prompt_set", "method", "prompts", "identical",
                                      "divergence_positions", "median_divergence"])


def check_agreement(rows: pd.DataFrame) -> pd.DataFrame:
    """Assert exactness for fp32 rows (an AssertionError names every differing prompt and method); return the
    agreement table of all rows (the measurement, for fp16/bf16)."""
    exact = rows[rows["dtype"].isin(EXACT_DTYPES) & ~rows["matches_greedy"].astype(bool)]
    if len(exact):
        where = ", ".join(f"{r.model}/{r.prompt_set}/{r.prompt_id}/{r.method} (token {r.first_divergence})"
                          for r in exact.itertuples())
        raise AssertionError("lookahead output differs from plain decoding (greedy or beam search) in "
                             f"{exact['dtype'].iloc[0]}: {where}")
    return agreement_table(rows)
