"""One attribute of one module instance replaced for the duration of a `with` block, then restored exactly."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

_MISSING = object()


@contextmanager
def patched(obj: object, name: str, value: object) -> Iterator[None]:
    """Set `obj.<name> = value` on the instance; afterwards (also on exceptions) put back exactly what the
    instance held before, or remove the instance attribute if it had none (so the class attribute shows again)."""
    before = obj.__dict__.get(name, _MISSING)
    setattr(obj, name, value)
    try:
        yield
    finally:
        if before is _MISSING:
            delattr(obj, name)
        else:
            setattr(obj, name, before)


@contextmanager
def patched_all(patches: list[tuple[object, str, object]]) -> Iterator[None]:
    with ExitStack() as stack:
        for obj, name, value in patches:
            stack.enter_context(patched(obj, name, value))
        yield
