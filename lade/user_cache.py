"""Where lade keeps what it writes (latency profiles; the lab's prepared models): `$LADE_CACHE` if set, else
`~/.cache/lade`. Callers that want another place pass it (e.g. `latency_profile(model, cache=...)`) or set
`$LADE_CACHE`; the repository's scripts point it at the checkout's `.cache/`."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """`$LADE_CACHE`, else `~/.cache/lade` (not created here)."""
    if os.environ.get("LADE_CACHE"):
        return Path(os.environ["LADE_CACHE"]).expanduser()
    return Path.home() / ".cache" / "lade"
