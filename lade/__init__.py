"""lade: model-independent lookahead decoding for transformers (arXiv 2402.02057).

The decoder depends on torch and transformers only; the research harness (prompt sets, model preparation,
benchmarks, experiments, figures) is the repository's `lab/` wing, used from a checkout.
"""

import importlib.metadata
from collections.abc import Callable, Mapping

__version__ = "0.2.0"  # the release; pyproject.toml reads it from here (CITATION.cff repeats it, tested)


def foreign_lade(metadata: Callable[[str], Mapping[str, str]] = importlib.metadata.metadata) -> str | None:
    """Why this package cannot run beside an installed distribution named `lade` (on PyPI, the reference
    implementation; it installs the same `lade` folder), or None when there is none or it is this project."""
    try:
        summary = metadata("lade").get("Summary") or ""
    except importlib.metadata.PackageNotFoundError:
        return None
    if summary.startswith("Model-independent lookahead decoding"):  # this project under its former name
        return None
    return (f"another distribution named 'lade' is installed ({summary!r}), which shares the import name 'lade' with "
            "this package (distribution 'lade-decoding'): run `pip uninstall lade`, then reinstall lade-decoding")


if (_reason := foreign_lade()) is not None:
    raise ImportError(_reason)

from .api import generate
from .auto import auto_config
from .config import LookaheadConfig
from .corpus import Corpus
from .cpu_linear import pack_cpu_linears, unpack_cpu_linears
from .decoding import lookahead_generate
from .outputs import LookaheadDecoderOnlyOutput, LookaheadEncoderDecoderOutput, LookaheadStats
from .rows import left_pad

__all__ = [
    "Corpus", "LookaheadConfig", "LookaheadDecoderOnlyOutput", "LookaheadEncoderDecoderOutput", "LookaheadStats",
    "auto_config", "generate", "left_pad", "lookahead_generate", "pack_cpu_linears", "unpack_cpu_linears",
]
