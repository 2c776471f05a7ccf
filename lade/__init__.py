"""lade: model-independent lookahead decoding for transformers (arXiv 2402.02057).

The decoder depends on torch and transformers only; the research harness (prompt sets, model preparation,
benchmarks, experiments, figures) is the repository's `lab/` wing, used from a checkout.
"""

from .api import generate
from .auto import auto_config
from .config import LookaheadConfig
from .cpu_linear import pack_cpu_linears, unpack_cpu_linears
from .decoding import lookahead_generate
from .outputs import LookaheadDecoderOnlyOutput, LookaheadEncoderDecoderOutput, LookaheadStats
from .rows import left_pad

__all__ = [
    "LookaheadConfig", "LookaheadDecoderOnlyOutput", "LookaheadEncoderDecoderOutput", "LookaheadStats", "auto_config",
    "generate", "left_pad", "lookahead_generate", "pack_cpu_linears", "unpack_cpu_linears",
]
