"""Timing in the research harness: `timed` (one call, wall time with device synchronisation), the one timed
generate call, forward calls counted and timed by hooks on the model (so plain generate, prompt lookup and lade are
measured alike), and `progress_bar` for the loops that run them."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from tqdm import tqdm

from lade.api import generate as lade_generate
from lade.config import LookaheadConfig
from lade.device import synchronize

T = TypeVar("T")


def progress_bar(iterable: Any = None, *, show: bool = True, **kwargs: Any) -> tqdm:
    """tqdm's text bar on a terminal (`show=False`: never); off where stderr is not a terminal, e.g. a notebook run by
    papermill, where a bar and tqdm.auto's missing-widgets warning would be stderr noise in the executed notebook."""
    return tqdm(iterable, disable=None if show else True, **kwargs)


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


@dataclass
class Timed:
    """One timed generate call."""

    new: torch.Tensor  # [B, T] the tokens every row generated, on the CPU (rows padded as generate pads them)
    wall: float  # seconds, the device synchronised before and after
    timer: ForwardTimer  # the call's forwards, counted and timed
    stats: list[Any] | None = None  # lade's LookaheadStats per row, when asked for; None for plain generate


def timed_generate(model, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   lookahead: LookaheadConfig | str | None, gen_kwargs: dict[str, Any], stats: bool = False) -> Timed:
    """The one timed generate call of the harness, for single, batched and beam calls alike: lade with `lookahead` (a
    config or "auto") or plain `model.generate` when it is None. input_ids, attention_mask: [B, P] (left-padded).
    stats: also return lade's per-row statistics (lade.generate's return_stats)."""
    timer = ForwardTimer(model)
    row_stats = None
    synchronize(model.device)
    with timer.measuring(), torch.inference_mode():
        start = time.perf_counter()
        if lookahead is None:
            out = model.generate(input_ids, attention_mask=attention_mask, **gen_kwargs)
        elif stats:
            result, _ = lade_generate(model, input_ids, lookahead, attention_mask=attention_mask, return_stats=True,
                                      return_dict_in_generate=True, **gen_kwargs)
            row_stats = result.row_stats or [result.lookahead_stats]  # one unpadded row decodes as a single sequence
            out = result.sequences
        else:
            out = lade_generate(model, input_ids, lookahead, attention_mask=attention_mask, **gen_kwargs)
        synchronize(model.device)
        wall = time.perf_counter() - start
    return Timed(out[:, input_ids.shape[1] :].cpu(), wall, timer, row_stats)
