"""lab: the research wing around the decoder (prompt sets, model preparation, benchmarks, experiment runners,
figures, provenance), used from a checkout of the repository; it is not part of the `lade` wheel. It imports the core
(`lade`); the core never imports it.

Needs the packages of requirements.lock (scripts/setup.sh installs them; the `lab` group of pyproject.toml lists them).
"""

from __future__ import annotations

import importlib.util

REQUIRED = ("datasets", "pandas", "matplotlib", "seaborn", "scipy", "gguf", "yaml")

_missing = [name for name in REQUIRED if importlib.util.find_spec(name) is None]
if _missing:
    raise ImportError(
        f"lab (the research harness) needs {', '.join(_missing)}: install requirements.lock "
        "(scripts/setup.sh does; the decoder itself, `import lade`, needs only torch and transformers)"
    )
