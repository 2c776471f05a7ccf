"""Drafters: what proposes each row's candidates for the next step and learns from what the step produced.

The loop knows a drafter only through `Drafter` (in the spirit of transformers' CandidateGenerator): `propose`
returns a `Draft` (Jacobi window levels to feed and candidate continuations to verify as a tree), `observe`
receives the step's `Outcome`. The loop owns verification, acceptance, cache compaction and emission, so a new
drafting idea is a new drafter, never a new loop: `register(name, factory)` makes `LookaheadConfig(draft=name)` run
it (docs/drafters.md). The built-in drafters register themselves the same way when this package is imported.
"""

from __future__ import annotations

from .base import Draft, Drafter, Offer, Outcome
from .lookahead import LookaheadDrafter
from .planning import PlanningDrafter, PlanningOptions, RecyclingOptions
from .pool import NGramPool
from .registry import Registration, RowContext, drafter_names, make_drafter, register, registered, unregister
from .window import LookaheadWindow

__all__ = ["Draft", "Drafter", "LookaheadDrafter", "LookaheadWindow", "NGramPool", "Offer", "Outcome",
           "PlanningDrafter", "PlanningOptions", "RecyclingOptions", "Registration", "RowContext", "drafter_names",
           "make_drafter", "register", "registered", "unregister"]
