"""lade: model-independent lookahead decoding for transformers (arXiv 2402.02057)."""
