"""The drafter registry: `LookaheadConfig(draft=NAME)` runs the drafter registered as NAME, built-in or not.

A registration says how to build one row's drafter, which settings of its own it takes (`draft_options`, an
options dataclass that validates itself) and which rules it sets on the shared fields (`check`). The built-in
drafters register themselves here exactly as a drafter written outside the package does (docs/drafters.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any

import torch

from .base import Drafter

# A LookaheadConfig: lade.config imports this module to validate a config, so the type is not imported here.
Config = Any


@dataclass(frozen=True)
class RowContext:
    """What a drafter learns of its row before the first step."""

    prompt: torch.Tensor  # [P] the row's prompt (no padding)
    source: torch.Tensor | None  # [S] an encoder-decoder model's source tokens, else None
    vocab_size: int
    latency: Callable[[float], float] | None = None  # q -> seconds of a q-token step (with adaptive=True), else None
    host_s: float = 0.0  # a drafting step's work outside the forward, in seconds (with adaptive=True)


DrafterFactory = Callable[[Config, RowContext], Drafter]  # (config, row) -> that row's drafter


@dataclass(frozen=True)
class Registration:
    """A registered drafter (see `register`)."""

    name: str
    factory: DrafterFactory
    options: type | None = None
    check: Callable[[Config], None] | None = None
    window_size: int = 0
    tree_nodes: Callable[[Config], int] | None = None
    adaptive: bool = False
    same_on_every_rank: bool = False

    def options_for(self, value: object) -> object:
        """`draft_options` as this drafter's options object: None (its defaults), a mapping of its fields or an
        instance; the options class validates its own fields."""
        if self.options is None:
            if value is not None:
                raise ValueError(f"draft={self.name!r} takes no draft_options, got {value!r}")
            return None
        if value is None:
            return self.options()
        if isinstance(value, self.options):
            return value
        if isinstance(value, Mapping):
            names = {f.name for f in fields(self.options)}
            unknown = sorted(set(value) - names)
            if unknown:
                raise ValueError(f"draft={self.name!r} has no option {', '.join(map(repr, unknown))}: its "
                                 f"draft_options are {sorted(names)}")
            return self.options(**value)
        raise ValueError(f"draft_options of draft={self.name!r} must be None, a dict or a {self.options.__name__}, "
                         f"got {value!r}")

    def max_tree_nodes(self, config: Config) -> int:
        """Most candidate-tree nodes one step of this drafter feeds (default: the config's step_budget)."""
        return self.tree_nodes(config) if self.tree_nodes is not None else config.step_budget


_DRAFTERS: dict[str, Registration] = {}


def register(name: str, factory: DrafterFactory, *, options: type | None = None,
             check: Callable[[Config], None] | None = None, window_size: int = 0,
             tree_nodes: Callable[[Config], int] | None = None, adaptive: bool = False,
             same_on_every_rank: bool = False, replace: bool = False) -> Registration:
    """Make `LookaheadConfig(draft=name)` build each row's drafter as `factory(config, row: RowContext)`.

    options: the drafter's own settings, a (frozen) dataclass validating itself in __post_init__; a config's
        `draft_options` (None, a dict of its fields or an instance) becomes one, and the drafter reads it there.
    check(config): raises ValueError (saying what to change) where the shared fields do not suit the drafter.
    window_size: the window width a config of this draft gets when it sets none (0: no Jacobi window).
    tree_nodes(config): most candidate-tree nodes one step feeds (default: config.step_budget); it bounds the
        step's size (`LookaheadConfig.max_step_tokens`).
    adaptive: the drafter honours adaptive=True (it offers its nodes ranked, `offer`, for the loop to size each step
        for the whole batch; or it plans each step itself from the latency model in RowContext), so
        `lade.auto_config(draft=name)` may pick it.
    same_on_every_rank: its drafts depend only on the row's tokens and the window's agreed levels (no logits, no
        timings), so lookahead parallelism (lade.distributed) may run it on every rank.
    replace: allow registering a name again (otherwise an error, so two drafters never share a name).
    """
    if not isinstance(name, str) or not name or "/" in name or "," in name or name == "plain":
        raise ValueError(f"a drafter name is a non-empty string without '/' or ',' and not 'plain' (it is part of "
                         f"config labels), got {name!r}")
    if name in _DRAFTERS and not replace:
        raise ValueError(f"a drafter named {name!r} is registered already: choose another name or pass replace=True")
    if not callable(factory):
        raise ValueError(f"the factory of drafter {name!r} must be callable (config, row) -> drafter, got {factory!r}")
    entry = Registration(name, factory, options, check, window_size, tree_nodes, adaptive, same_on_every_rank)
    _DRAFTERS[name] = entry
    return entry


def unregister(name: str) -> None:
    """Forget a drafter registered by `register` (a test's or a script's own)."""
    registered(name)
    del _DRAFTERS[name]


def registered(name: str) -> Registration:
    """The registration of drafter `name`; a clear error naming the registered ones otherwise."""
    entry = _DRAFTERS.get(name) if isinstance(name, str) else None
    if entry is None:
        raise ValueError(f"draft must be a registered drafter, one of {drafter_names()}, got {name!r}; a drafter "
                         "written outside lade is registered with lade.drafters.register(name, factory)")
    return entry


def drafter_names() -> tuple[str, ...]:
    return tuple(_DRAFTERS)


def make_drafter(config: Config, row: RowContext) -> Drafter:
    """The drafter of `config` for one row; a disabled config runs plain one-token steps, the lookahead drafter
    proposing nothing then."""
    return registered(config.draft if config.enabled else "lookahead").factory(config, row)
