"""lade.lab: the research harness around the decoder (prompt sets, model preparation, benchmarks, experiment
runners, figures, provenance). It imports the core (`lade`); the core never imports it.

Needs the `lab` extra: `pip install 'lade-decoding[lab]'` (the repository's requirements.lock installs it).
"""

from __future__ import annotations

import importlib.util

REQUIRED = ("datasets", "pandas", "matplotlib", "seaborn", "scipy", "gguf", "yaml")

_missing = [name for name in REQUIRED if importlib.util.find_spec(name) is None]
if _missing:
    raise ImportError(
        f"lade.lab (the research harness) needs {', '.join(_missing)}: pip install 'lade-decoding[lab]' "
        "(the decoder itself, `import lade`, needs only torch and transformers)"
    )
