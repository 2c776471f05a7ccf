"""Where the research wing finds the repository's files: data, results, figures, published numbers, the GPU table.
The lab runs from a checkout, so REPO is the folder above this package.

Results and figures can be redirected (tests write to a temporary folder) with the environment variables
LADE_RESULTS_DIR and LADE_FIGURES_DIR; a quick (smoke) run writes into a `quick/` subfolder of each so that
it never overwrites the results and figures of a full run.
"""

from __future__ import annotations

import os
from pathlib import Path

from lade.user_cache import cache_dir

REPO = Path(__file__).resolve().parents[2]  # the repository root of the checkout
DATA_DIR = REPO / "data"
PUBLISHED_DIR = DATA_DIR / "published"
GPUS_CSV = DATA_DIR / "gpus.csv"

__all__ = ["DATA_DIR", "GPUS_CSV", "PUBLISHED_DIR", "REPO", "cache_dir", "figures_dir", "published", "results_dir"]


def _dir(env: str, default: Path, quick: bool) -> Path:
    base = Path(os.environ[env]).expanduser() if os.environ.get(env) else default
    path = base / "quick" if quick else base
    path.mkdir(parents=True, exist_ok=True)
    return path


def results_dir(quick: bool = False) -> Path:
    """`$LADE_RESULTS_DIR` or `<repo>/data/results` (`quick/` inside it for quick runs); created if missing."""
    return _dir("LADE_RESULTS_DIR", DATA_DIR / "results", quick)


def figures_dir(quick: bool = False) -> Path:
    """`$LADE_FIGURES_DIR` or `<repo>/figures` (`quick/` inside it for quick runs); created if missing."""
    return _dir("LADE_FIGURES_DIR", REPO / "figures", quick)


def published(name: str) -> Path:
    """data/published/<name>.csv; a clear error naming the available tables if it is missing."""
    path = PUBLISHED_DIR / f"{name}.csv"
    if not path.exists():
        have = sorted(p.stem for p in PUBLISHED_DIR.glob("*.csv"))
        raise FileNotFoundError(f"no published table {path}; available: {have}")
    return path
