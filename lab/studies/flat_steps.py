"""Would drafting pay at batch > 1 if a batch step fed only its rows' own tokens? An experiment beside notebook 09.

lade feeds the B rows of a batch step as [B, Q], each row padded to the widest row's Q tokens
(lade.layout.stack_layouts), and sizes the step at that cost (lade.drafters.allocation). A method built by
`flat_method` instead, inside `flat_steps(lag)`:
- feeds the rows' own tokens alone, flattened to one sequence [1, N] (N: the rows' tokens, no padding), so every
  per-token layer runs on N tokens. Attention, the one operation across tokens, runs per row on the padded [B, Q]
  layout of lade's own step and writes its keys and values to the cache there, so each row's logits are those of
  lade's padded step (`FlatCall`, passed as lade's `lookahead_model_call`);
- sizes each step at that cost: N tokens in all (lade prices q tokens over B rows as a [B, q / B] step), not B * Q;
- with lag > 0, weights each row's draft-node values by exp(-(tokens it is ahead of the batch's least advanced row) /
  lag): a static batch ends with its slowest row, so the nodes of rows ahead buy little.
Everything else is lade's loop; lab.harness.batched compares every row token for token with plain batched greedy.

    python -m lab.studies.flat_steps --batch-sizes 2,4 --n 12 --config merged/24/adaptive --lag 2 --threads 2 \
        --out data/results/experiments/flat_steps/batches.jsonl
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from contextvars import ContextVar
from unittest import mock

import pandas as pd
import torch
from transformers import AttentionInterface

import lade.loop
from lab.harness.batched import SETS, run_batched, summarize_batches
from lab.harness.methods import Method
from lab.harness.models import load_model
from lab.harness.results import report
from lade.attention.interface import SDPA, sdpa_forward
from lade.cache import self_attention_cache
from lade.compat import ATTN_IMPLEMENTATION
from lade.drafters import allocation
from lade.layout import BatchLayout
from lade.model_call import ModelCall
from lade.scoped import overriding

FLAT = "lab_flat"  # the attention implementation a flat step's layers read
LAG = 2.0  # tokens ahead at which a row's node values weigh 1/e
_LAYOUT: ContextVar[tuple[int, int, torch.Tensor]] = ContextVar("flat_layout")  # (B, Q, flat index [N] into B * Q)
_SIZING: ContextVar[tuple[list[float], Callable[[int], float]] | None] = ContextVar("flat_sizing", default=None)
# a flat step's (row weights, seconds of a step feeding N tokens in all)
_FED: ContextVar[int | None] = ContextVar("flat_fed", default=None)  # tokens this step fed flat (None: not flat)


def _padded(x: torch.Tensor) -> torch.Tensor:
    """[1, H, N, D] of a flat step -> [B, H, Q, D] in lade's padded layout (padding slots zero)."""
    rows, width, index = _LAYOUT.get()
    out = x.new_zeros(rows * width, x.shape[1], x.shape[3])
    out[index] = x[0].transpose(0, 1)
    return out.view(rows, width, x.shape[1], x.shape[3]).transpose(1, 2)


def flat_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                   attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                   **kwargs) -> tuple[torch.Tensor, None]:
    """query [1, H, N, D]; key, value [B, Hkv, past + Q, D] as the cache holds them -> ([1, N, H, Dv], None)."""
    rows, width, index = _LAYOUT.get()
    out, _ = sdpa_forward(module, _padded(query), key, value, attention_mask, scaling=scaling, dropout=dropout,
                          **kwargs)  # [B, Q, H, Dv]
    return out.reshape(rows * width, *out.shape[2:])[index].unsqueeze(0), None


AttentionInterface.register(FLAT, flat_attention)


class FlatCall(ModelCall):
    """lade's model call with its several-row steps fed flat (sdpa models on the "mask" attention path)."""

    def __init__(self, model, cache, attention: str = "auto") -> None:
        super().__init__(model, cache, attention)
        if self.attention.implementation != SDPA:
            raise ValueError("flat steps run under lade's sdpa attention: load the model with attn_implementation="
                             "'sdpa' and keep LookaheadConfig(attention='auto' or 'mask')")

    def step(self, batch: BatchLayout, first_positions: torch.Tensor, past: int,
             cache_visible: torch.Tensor | None) -> torch.Tensor:
        if batch.real is None:  # one row: nothing to flatten
            return super().step(batch, first_positions, past, cache_visible)
        rows, width = batch.input_ids.shape
        index = batch.real.reshape(-1).nonzero().squeeze(1)  # [N] the real tokens' slots in B * Q
        slot = torch.full((rows * width,), -1, dtype=torch.long, device=index.device)
        slot[index] = torch.arange(len(index), device=index.device)  # flat position of each real slot
        kept = [(b, k) for b, layout in enumerate(batch.rows) for k, r in enumerate(batch.kept_rows) if r < layout.size]
        keep = slot[torch.tensor([b * width + batch.kept_rows[k] for b, k in kept], device=index.device)]  # [K']
        mask = self.attention.step_mask(batch, past, cache_visible, self.model.dtype)  # [B, 1, Q, past + Q]
        layers = list(self_attention_cache(self.cache).layers)
        token = _LAYOUT.set((rows, width, index))
        for layer in layers:  # the step's keys and values reach the cache in the padded layout
            layer.update = _padding_update(layer.update)
        try:
            with overriding([(config, ATTN_IMPLEMENTATION, FLAT) for config in self.attention._configs]):
                out = self.model(input_ids=batch.input_ids.reshape(-1)[index][None],
                                 position_ids=batch.position_ids(first_positions).reshape(-1)[index][None],
                                 attention_mask=mask, use_cache=True, return_dict=True,
                                 **{self._cache_kwarg: self.cache}, logits_to_keep=keep)
        finally:
            for layer in layers:
                del layer.update
            _LAYOUT.reset(token)
        logits = out.logits.float()[0]  # [K', V]
        full = logits.new_zeros(rows, len(batch.kept_rows), logits.shape[-1])  # [B, K, V], padding rows zero
        full[[b for b, _ in kept], [k for _, k in kept]] = logits
        _FED.set(len(index))  # what the step's timed forward fed, for StepSizer.observe
        return full


def _padding_update(update: Callable) -> Callable:
    return lambda keys, values, *args, **kwargs: update(_padded(keys), _padded(values), *args, **kwargs)


def lag_weights(generated: Sequence[int], lag: float) -> list[float]:
    """Each row's weight from its tokens so far: exp(-(tokens ahead of the least advanced row) / lag); all 1 for
    lag <= 0."""
    least = min(generated)
    return [1.0 if lag <= 0 else math.exp(-(n - least) / lag) for n in generated]


def allocate_flat(values: Sequence[Sequence[float]], fixed: Sequence[int], forward: Callable[[int], float],
                  host_s: float = 0.0, margin: float = 1.0, weights: Sequence[float] | None = None) -> list[int]:
    """lade.drafters.allocation.allocate for flat steps: forward(N) is the seconds of a step feeding N tokens in all,
    and row b's tokens count weights[b] each (None: 1) -> draft nodes per row."""
    rows = len(values)
    weights = [1.0] * rows if weights is None else list(weights)
    order = sorted(((value * weights[b], b) for b, row in enumerate(values) for value in row), key=lambda t: -t[0])

    def rate(expected: float, total: int, drafting: int) -> float:
        return expected / (forward(total) + host_s * drafting)

    counts, total, drafting, expected = [0] * rows, sum(fixed), 0, sum(weights)
    best, taken = margin * rate(expected, total, 0), 0
    for n, (value, b) in enumerate(order, 1):
        drafting += counts[b] == 0
        counts[b] += 1
        total, expected = total + 1, expected + value
        if rate(expected, total, drafting) > best:
            best, taken = rate(expected, total, drafting), n
    chosen = [0] * rows
    for _, b in order[:taken]:
        chosen[b] += 1
    return chosen


@contextmanager
def flat_steps(lag: float = LAG) -> Iterator[None]:
    """While open, lade calls made with `FlatCall` size their steps for it (allocate_flat, lag-weighted) and correct
    their step cost by the tokens a flat step fed; every other call runs as lade runs it."""
    drafts, allocate, observe = lade.loop._drafts, allocation.allocate, allocation.StepSizer.observe

    def flat_drafts(run, rows):
        _FED.set(None)  # a new step: nothing fed flat yet
        flat = isinstance(run.call, FlatCall) and run.sizer is not None and len(rows) > 1
        token = _SIZING.set((lag_weights([row.ids.shape[1] for row in rows], lag), run.sizer.cost.forward_s)
                            if flat else None)
        try:
            return drafts(run, rows)
        finally:
            _SIZING.reset(token)

    def sized(values, fixed, forward, host_s=0.0, margin=1.0):
        sizing = _SIZING.get()
        if sizing is None:
            return allocate(values, fixed, forward, host_s, margin)
        weights, forward_total = sizing
        return allocate_flat(values, fixed, forward_total, host_s, margin, weights)

    def observed(self, tokens, seconds):
        fed = _FED.get()
        observe(self, tokens if fed is None else fed, seconds)

    with ExitStack() as stack:
        stack.enter_context(mock.patch.object(lade.loop, "_drafts", flat_drafts))
        stack.enter_context(mock.patch.object(allocation, "allocate", sized))
        stack.enter_context(mock.patch.object(allocation.StepSizer, "observe", observed))
        yield


def flat_method(method: Method) -> Method:
    """`method` (lade) with its batch steps fed flat, named `<name>-flat`."""
    if method.kind != "lade":
        raise ValueError(f"flat steps are a lade method's; got {method.name}")
    return Method(f"{method.name}-flat", "lade", method.lookahead,
                  {**method.generate_kwargs, "lookahead_model_call": FlatCall})


def run_flat(model, tokenizer, prompt_sets: Sequence[str], batch_sizes: Sequence[int], method: Method,
             n_prompts: int, max_new_tokens: int = 128, lag: float = LAG, **kwargs) -> pd.DataFrame:
    """lab.harness.batched.run_batched with `method` fed both ways, padded (lade's) and flat, beside plain batched
    greedy."""
    with flat_steps(lag):
        return run_batched(model, tokenizer, prompt_sets, batch_sizes, [method, flat_method(method)], n_prompts,
                           max_new_tokens, lag=lag, **kwargs)


def main(argv: Sequence[str] | None = None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(prog="python -m lab.studies.flat_steps", description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="embedded", help="'embedded', a local model folder or a Hub id")
    parser.add_argument("--sets", default=",".join(SETS), help="comma-separated prompt sets")
    parser.add_argument("--n", type=int, default=16, help="prompts per set")
    parser.add_argument("--batch-sizes", default="4", help="comma-separated")
    parser.add_argument("--config", default="merged/24/adaptive", help="a lade config label (adaptive: sized per step)")
    parser.add_argument("--lag", type=float, default=LAG, help="tokens ahead at which a row's nodes weigh 1/e (0: off)")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--out", default=None, help="results file (.jsonl)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_model(args.model)
    sets, sizes = [s for s in args.sets.split(",") if s], [int(b) for b in args.batch_sizes.split(",")]
    df = run_flat(model, tokenizer, sets, sizes, Method.from_label(args.config), args.n, args.max_new_tokens,
                  args.lag, model_arg=args.model, threads=torch.get_num_threads())
    report(summarize_batches(df), df, args.out)
    return df


if __name__ == "__main__":
    main()
