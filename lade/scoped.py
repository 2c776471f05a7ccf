"""Attributes of single objects overridden for the current thread only, for the duration of a `with` block.

lade runs its forwards on the user's model, which other threads may be running at the same moment (a server
answering two requests, a notebook with a background generation). For its own forward a lookahead step needs the
model to read a different attention implementation (`config._attn_implementation`) and, in encoder-decoder
decoders, different positions (`embed_positions.forward`, `_relative_position_bucket`). Assigning those on the
shared model would be seen by every other thread mid-forward, so nothing is assigned. Instead:

- `overriding([(obj, name, value), ...])` records the values in a `contextvars.ContextVar` for the block. A context
  variable is private to the thread (and asyncio task) that sets it, so other threads never see it.
- The first time a class is overridden, its attribute `name` is wrapped, once and for good, in a descriptor that
  returns the recorded value for an object this thread has overridden, and otherwise exactly what the original
  class attribute returns (a property, a method, a staticmethod), from the same code. This is the only permanent
  change, and it is invisible: nothing is stored on any instance, so state dicts, saved configs, `repr`, `copy`,
  `pickle`, `type(config) is LlamaConfig` and every value another thread reads are those of an untouched model;
  the wrapper is placed on the object's own class (not on transformers' base classes) and costs one context
  variable read per attribute access; under torch.compile tracing it defers to the original without reading the
  context variable.

An instance attribute of the same name (a hook that replaced `module.forward`) would hide the override, so
`overriding` checks that every object reads its value and raises otherwise.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import torch

_ACTIVE: ContextVar[dict[tuple[int, str], object] | None] = ContextVar("lade_overrides", default=None)
_MISSING = object()
_INSTALL = threading.Lock()


class _Scoped:
    """A class attribute that answers from the context variable for overridden objects, else as `original`."""

    def __init__(self, original: object, name: str) -> None:
        self.original, self.name = original, name
        self._get = getattr(type(original), "__get__", None)

    def __get__(self, obj: object, objtype: type | None = None) -> object:
        if obj is not None and not torch.compiler.is_compiling():
            active = _ACTIVE.get()
            if active is not None:
                value = active.get((id(obj), self.name), _MISSING)
                if value is not _MISSING:
                    return value
        return self.original if self._get is None else self._get(self.original, obj, objtype)


class _ScopedData(_Scoped):
    """The same for a data descriptor (a property): assignments and deletions go to the original."""

    def __set__(self, obj: object, value: object) -> None:
        self.original.__set__(obj, value)

    def __delete__(self, obj: object) -> None:
        self.original.__delete__(obj)


def _class_attribute(cls: type, name: str) -> object:
    for klass in cls.__mro__:
        if name in klass.__dict__:
            return klass.__dict__[name]
    raise AttributeError(f"{cls.__name__} has no class attribute {name!r} for lade to override")


def install(cls: type, name: str) -> None:
    """Wrap `cls.<name>` (inherited or its own) in a scoped descriptor on `cls`; idempotent and thread-safe."""
    if isinstance(_class_attribute(cls, name), _Scoped):
        return
    with _INSTALL:
        original = _class_attribute(cls, name)
        if not isinstance(original, _Scoped):
            wrapper = _ScopedData if hasattr(type(original), "__set__") else _Scoped
            setattr(cls, name, wrapper(original, name))


@contextmanager
def overriding(overrides: list[tuple[object, str, object]]) -> Iterator[None]:
    """`obj.<name>` reads `value` for each triple, in this thread and until the block ends (also on exceptions)."""
    for obj, name, _ in overrides:
        install(type(obj), name)
    token = _ACTIVE.set({**(_ACTIVE.get() or {}), **{(id(obj), name): value for obj, name, value in overrides}})
    try:
        for obj, name, value in overrides:
            if getattr(obj, name) is not value:
                raise RuntimeError(f"lade cannot override {type(obj).__name__}.{name}: the instance sets its own "
                                   f"{name!r} (a hook?), which hides the class attribute")
        yield
    finally:
        _ACTIVE.reset(token)
