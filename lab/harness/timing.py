"""Timing in the research harness: `timed` (one call, wall time with device synchronisation) and the one timed
generate call, forward calls counted and timed by hooks on the model (so plain generate, prompt lookup and lade are
measured alike)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import torch

from lade.api import generate as lade_generate
from lade.config import LookaheadConfig
from lade.device import synchronize

T = TypeVar("T")


def timed(fn: Callable[..., T], *args: Any, device: torch.device | None = None, **kwargs: Any) -> tuple[T, float]:
    """fn(*args, **kwargs) -> (its result, wall seconds); `device`'s queued work is waited for before and after."""
    if device is not None:
        synchronize(device)
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    if device is not None:
        synchronize(device)
    return out, time.perf_counter() - start


class ForwardTimer:
    """Counts and times the forward calls of one module (hooks removed when the `with` block ends)."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.module = module
        self.calls = 0
        self.seconds = 0.0
        self.fed: list[int] = []  # tokens fed per row and call (a batch's rows are padded to one width)
        self.rows: list[int] = []  # rows (batch size) per call
        self._start = 0.0

    def _pre(self, _module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        ids = kwargs.get("input_ids", kwargs.get("decoder_input_ids", args[0] if args else None))
        self.fed.append(ids.shape[-1] if ids is not None else 0)
        self.rows.append(ids.shape[0] if ids is not None and ids.dim() > 1 else 1)
        synchronize(self.module.device)
        self._start = time.perf_counter()

    def _post(self, *_: Any) -> None:
        synchronize(self.module.device)
        self.seconds += time.perf_counter() - self._start
        self.calls += 1

    @contextmanager
    def measuring(self) -> Iterator["ForwardTimer"]:
        self.calls, self.seconds, self.fed, self.rows = 0, 0.0, [], []
        handles = [self.module.register_forward_pre_hook(self._pre, with_kwargs=True),
                   self.module.register_forward_hook(self._post)]
        try:
            yield self
        finally:
            for handle in handles:
                handle.remove()

    @property
    def step_tokens(self) -> float:
        """Mean tokens fed per forward after the prefill."""
        return sum(self.fed[1:]) / max(len(self.fed) - 1, 1)

    @property
    def batch_fed(self) -> list[int]:
        """Tokens the model computed in each forward after the prefill: rows x tokens per row."""
        return [r * q for r, q in zip(self.rows[1:], self.fed[1:])]

    @property
    def single_token_steps(self) -> float:
        """Share of the forwards after the prefill that fed one token."""
        return self.fed[1:].count(1) / max(len(self.fed) - 1, 1)


def timed_generate(model, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   lookahead: LookaheadConfig | str | None, gen_kwargs: dict[str, Any],
                   ) -> tuple[torch.Tensor, float, ForwardTimer]:
    """One generate call, lade with `lookahead` (a config or "auto") or plain `model.generate` when it is None ->
    (new tokens [T] of the first row, on the CPU; wall seconds; the forward timer)."""
    timer = ForwardTimer(model)
    synchronize(model.device)
    with timer.measuring(), torch.inference_mode():
        start = time.perf_counter()
        if lookahead is None:
            out = model.generate(input_ids, attention_mask=attention_mask, **gen_kwargs)
        else:
            out = lade_generate(model, input_ids, lookahead, attention_mask=attention_mask, **gen_kwargs)
        synchronize(model.device)
        wall = time.perf_counter() - start
    return out[0, input_ids.shape[1] :].cpu(), wall, timer
