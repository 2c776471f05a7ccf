"""Caching latency profiles (lade.cost.LatencyProfile): each measured once per model, device and row count, kept as
JSON in `<lade cache>/cost/latency-<hash of lade.cost.device_key>.json`, read back on later calls.

Best effort, never stopping decoding: a cache file that is not a usable profile of this model and device (damaged,
edited, of an older step: the key carries lade.cost.STEP_VERSION, not a regular file) is ignored with a warning and
measured again; a cache that cannot be written keeps the measured profile in memory for this process.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from .cost import BATCH_QS, LONG_CONTEXT, LONG_QS, LatencyProfile, ProfileError, device_key, measure_latency
from .user_cache import cache_dir

MEASURE_ROUNDS = 4  # most measurements merged until a fresh profile is usable (noise only ever adds time)
MAX_CACHE_BYTES = 1 << 20  # a cached profile is a few hundred bytes; a larger file is not one
_IN_MEMORY: dict[Path, LatencyProfile] = {}  # profiles whose cache file could not be written, kept for this process


def latency_profile(model, cache: Path | None = None, refresh: bool = False,
                    measure: Callable[..., LatencyProfile] = measure_latency, rows: int = 1, long: bool = False,
                    **measure_kwargs) -> LatencyProfile:
    """The model's latency profile, measured once (`measure(model, **measure_kwargs)`) and cached in
    `<lade cache>/cost/latency-<hash>.json`. rows > 1: the profile of steps of `rows` sequences (measured with
    rows=rows at the step sizes BATCH_QS unless qs= is given), cached beside it; long: the one-row profile at
    LONG_CONTEXT cached tokens (step sizes LONG_QS unless given), cached beside it.

    Caching is best effort and never stops decoding: a cache file that is not a usable profile of this model and
    device (damaged, edited, not a regular file) is ignored and measured again, a cache that cannot be written keeps
    the measured profile in memory for this process; either gives one warning naming the file and the reason."""
    key = device_key(model, rows, long)
    path = profile_path(model, cache, rows, long)
    if rows > 1:
        measure_kwargs = {"qs": BATCH_QS, **measure_kwargs, "rows": rows}
    if long:
        measure_kwargs = {"qs": LONG_QS, "context": LONG_CONTEXT, **measure_kwargs, "long": True}
    if not refresh and path in _IN_MEMORY:
        return _IN_MEMORY[path]
    problems = []
    if not refresh:
        try:
            profile = read_profile(path)
            if profile is not None and profile.key == key:
                return profile
            if profile is not None:
                problems.append(f"ignored {path} (it holds the profile of {profile.key!r}) and measured the profile "
                                "again")
        except (OSError, ProfileError) as error:
            problems.append(f"ignored {path} ({error}) and measured the profile again")
    profile = measure(model, **measure_kwargs)
    for _ in range(MEASURE_ROUNDS - 1):
        if profile.problem() is None:
            break
        again = measure(model, **measure_kwargs)  # other jobs took the device: more repeats, fastest kept
        profile = replace(profile, seconds=tuple(map(min, profile.seconds, again.seconds)))
    try:
        profile.check()
        write_profile(path, profile)
    except ProfileError as error:
        _IN_MEMORY[path] = profile
        problems.append(f"did not cache the measured latency profile, too noisy to reuse ({error}); it is kept in "
                        "memory for this process")
    except OSError as error:
        _IN_MEMORY[path] = profile
        problems.append(f"could not cache the latency profile in {path} ({error}); it is kept in memory for this "
                        "process: set LADE_CACHE to a writable folder")
    if problems:
        warnings.warn("lade " + "; ".join(problems), stacklevel=2)
    return profile


def is_cached(model, rows: int = 1, long: bool = False) -> bool:
    """Whether `latency_profile(model, rows=rows, long=long)` reads a usable profile (this process's or the cache
    file's)."""
    path = profile_path(model, rows=rows, long=long)
    try:
        profile = _IN_MEMORY.get(path) or read_profile(path)
    except (OSError, ProfileError):
        return False
    return profile is not None and profile.key == device_key(model, rows, long)


def profile_path(model, cache: Path | None = None, rows: int = 1, long: bool = False) -> Path:
    """Where the model's latency profile is cached: `<cache or lade's>/cost/latency-<hash of device_key>.json`."""
    digest = hashlib.sha1(device_key(model, rows, long).encode()).hexdigest()[:16]
    return (cache or cache_dir()) / "cost" / f"latency-{digest}.json"


def read_profile(path: Path) -> LatencyProfile | None:
    """The profile cached at `path`; None when there is none (no file, or a missing folder on the way); OSError or
    ProfileError when the path holds something else. Opened without blocking (a FIFO in its place must not hang)
    and read only if it is a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise ProfileError("a directory, not a file" if stat.S_ISDIR(mode) else "not a regular file")
        with os.fdopen(os.dup(fd), "rb") as file:
            data = file.read(MAX_CACHE_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_CACHE_BYTES:
        raise ProfileError(f"larger than {MAX_CACHE_BYTES} bytes")
    return LatencyProfile.from_json(data)


def write_profile(path: Path, profile: LatencyProfile) -> None:
    """Write `path` atomically (readers see the old file or the whole new one) through a private temporary file
    created exclusively in the same folder (an unpredictable name; a link planted there is never followed)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as file:
            file.write(profile.to_json())
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
