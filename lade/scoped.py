"""Attributes of single objects overridden for the current thread only, for the duration of a `with` block.

lade runs its forwards on the user's model, which other threads may be running at the same moment (a server
answering two requests, a notebook with a background generation). For its own forward a lookahead step needs the
model to read a different attention implementation (`config._attn_implementation`) and, in encoder-decoder
decoders, different positions (`embed_positions.forward`, `_relative_position_bucket`). Assigning those on the
shared model would be seen by every other thread mid-forward, so nothing is assigned. Instead:

- `overriding([(obj, name, value), ...])` records the values in a `contextvars.ContextVar` for the block. A context
  variable is private to the thread (and asyncio task) that sets it, so other threads never see it.
- The first time a class is overridden, its attribute `name` is wrapped, once and for good: a method in a method
  that calls the recorded function for an object this thread has overridden, any other attribute (a property, a
  staticmethod) in a descriptor that returns the recorded value; otherwise both give exactly what the original
  gives, from the same code. This is the only permanent change, and it is invisible: nothing is stored on any
  instance, so state dicts, saved configs, `repr`, `copy`, `pickle`, `type(config) is LlamaConfig` and every value
  another thread reads are those of an untouched model. The wrapper is placed on the object's own class (never on
  transformers' base classes), costs one context variable read per access, and under torch.compile tracing defers
  to the original without reading the context variable (so a compiled model traces as before).

An instance attribute of the same name (a hook that replaced `module.forward`) would hide the override, so
`overriding` refuses such an object instead of letting the override be silently ignored.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from types import FunctionType, MethodType

import torch

_ACTIVE: ContextVar[dict[tuple[int, str], object] | None] = ContextVar("lade_overrides", default=None)
_MISSING = object()
_INSTALL = threading.Lock()


class _Scoped:
    """A class attribute (a property, staticmethod, ...) that answers from the context variable for overridden
    objects, else as `original`."""

    def __init__(self, original: object, name: str) -> None:
        self.original, self.name = original, name

    def __get__(self, obj: object, objtype: type | None = None) -> object:
        if obj is not None:
            value = _override(obj, self.name)
            if value is not _MISSING:
                return value
        return self.plain(obj, objtype)

    def plain(self, obj: object, objtype: type | None = None) -> object:
        """What the original attribute gives, whatever this thread overrides."""
        original = self.original  # spelled out where torch.compile cannot trace the builtin descriptors' __get__
        if isinstance(original, property) and obj is not None:
            return original.fget(obj)
        if isinstance(original, staticmethod):
            return original.__func__
        get = getattr(type(original), "__get__", None)
        return original if get is None else get(original, obj, objtype)


def _override(obj: object, name: str) -> object:
    """The value this thread set for `obj.<name>`, else _MISSING (always under torch.compile tracing).

    is_dynamo_compiling is True only inside the graph being traced: torch.compiler.is_compiling() reads one flag for
    the whole process, raised while any thread compiles (eager flex_attention compiles at each call), which would
    switch off every other thread's overrides meanwhile."""
    if torch.compiler.is_dynamo_compiling():
        return _MISSING
    active = _ACTIVE.get()
    return _MISSING if active is None else active.get((id(obj), name), _MISSING)


def _scoped_method(original: FunctionType, name: str) -> FunctionType:
    """A method that calls this thread's override for its object (with the call's arguments), else `original`
    (a plain method, so that torch.compile traces it like the original)."""

    @functools.wraps(original)
    def method(self, *args, **kwargs):
        override = _override(self, name)
        if override is not _MISSING:
            return override(*args, **kwargs)
        return original(self, *args, **kwargs)

    method.__lade_scoped__ = True
    return method


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


def _installed(attribute: object) -> bool:
    return isinstance(attribute, _Scoped) or getattr(attribute, "__lade_scoped__", False)


def install(cls: type, name: str) -> None:
    """Wrap `cls.<name>` (inherited or its own) in a scoped method or descriptor on `cls`; idempotent and
    thread-safe."""
    if _installed(_class_attribute(cls, name)):
        return
    with _INSTALL:
        original = _class_attribute(cls, name)
        if _installed(original):  # another thread was first
            return
        if isinstance(original, FunctionType):
            setattr(cls, name, _scoped_method(original, name))
        else:
            wrapper = _ScopedData if hasattr(type(original), "__set__") else _Scoped
            setattr(cls, name, wrapper(original, name))


def original(obj: object, name: str) -> object:
    """`obj.<name>` as the class defines it, whatever this thread overrides: what an override calls to delegate."""
    install(type(obj), name)
    attribute = _class_attribute(type(obj), name)
    if isinstance(attribute, _Scoped):
        return attribute.plain(obj, type(obj))
    return MethodType(attribute.__wrapped__, obj)


@contextmanager
def overriding(overrides: list[tuple[object, str, object]]) -> Iterator[None]:
    """`obj.<name>` reads `value` (a method: calls `value` with the call's arguments) for each triple, in this thread
    and until the block ends (also on exceptions)."""
    for obj, name, _ in overrides:
        install(type(obj), name)
        if not isinstance(_class_attribute(type(obj), name), _ScopedData) and name in getattr(obj, "__dict__", {}):
            raise RuntimeError(f"lade cannot override {type(obj).__name__}.{name}: the instance sets its own "
                               f"{name!r} (a hook?), which hides the class attribute")
    token = _ACTIVE.set({**(_ACTIVE.get() or {}), **{(id(obj), name): value for obj, name, value in overrides}})
    try:
        yield
    finally:
        _ACTIVE.reset(token)
