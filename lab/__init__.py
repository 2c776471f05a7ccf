"""lab: the research wing around the decoder (prompt sets, model preparation, benchmarks, experiment runners,
figures, provenance), used from a checkout of the repository; it is not part of the `lade` wheel. It imports the core
(`lade`); the core never imports it.

Needs the packages of requirements.lock (scripts/setup.sh installs them; the `lab` group of pyproject.toml lists them).
"""

from __future__ import annotations

import importlib.util
import warnings

REQUIRED = ("datasets", "pandas", "matplotlib", "seaborn", "scipy", "gguf", "yaml")

_missing = [name for name in REQUIRED if importlib.util.find_spec(name) is None]
if _missing:
    raise ImportError(
        f"lab (the research harness) needs {', '.join(_missing)}: install requirements.lock "
        "(scripts/setup.sh does; the decoder itself, `import lade`, needs only torch and transformers)"
    )

# tqdm.auto, imported by huggingface_hub (so by transformers), warns where ipywidgets is missing, as in a notebook run
# by papermill; the lab's own bars are off there (lab.harness.timing.progress_bar), so that warning is stderr noise
warnings.filterwarnings("ignore", message="IProgress not found")
