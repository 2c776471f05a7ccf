"""lade: model-independent lookahead decoding for transformers (arXiv 2402.02057)."""

from .api import generate
from .config import LookaheadConfig
from .decoding import lookahead_generate
from .outputs import LookaheadDecoderOnlyOutput, LookaheadEncoderDecoderOutput, LookaheadStats

__all__ = [
    "LookaheadConfig", "LookaheadDecoderOnlyOutput", "LookaheadEncoderDecoderOutput", "LookaheadStats", "generate",
    "lookahead_generate",
]
