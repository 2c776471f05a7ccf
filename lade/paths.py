"""Where lade keeps what it writes: the cache directory (latency profiles, prepared models).

`$LADE_CACHE` if set, else `<source checkout>/.cache` when lade runs from a source checkout, else
`~/.cache/lade`. The research harness (lade.lab) places its results and figures relative to SOURCE_ROOT.
"""

from __future__ import annotations

import os
from pathlib import Path

SOURCE_ROOT = Path(__file__).resolve().parents[1]  # the repository root of a source checkout


def is_source_checkout() -> bool:
    return (SOURCE_ROOT / "pyproject.toml").exists()


def cache_dir() -> Path:
    """`$LADE_CACHE`, else `<repo>/.cache` for a source checkout, else `~/.cache/lade` (not created here)."""
    if os.environ.get("LADE_CACHE"):
        return Path(os.environ["LADE_CACHE"]).expanduser()
    return SOURCE_ROOT / ".cache" if is_source_checkout() else Path.home() / ".cache" / "lade"
