"""Quantized models: which quantization methods lade decodes, and what to install for them.

lade runs the model's own forward on one fused step of many tokens, so a quantized model decodes like
its plain greedy run when its quantized layers compute each token's row on its own:
- bitsandbytes 4-bit (NF4 / FP4, double quantization): weights are dequantized (or multiplied blockwise),
  activations stay in the compute dtype, rows are independent.
- bitsandbytes 8-bit (LLM.int8) quantizes the *activations* too (per row, rounded to int8; with
  `llm_int8_threshold > 0` the fp16 outlier columns are even chosen over all rows of the step). Rounding
  is discontinuous: the ~1e-7 float differences between a many-token step and a one-token step can
  cross a rounding boundary and move an activation by a whole int8 step. Measured: SmolLM2-135M in
  8-bit drifts from plain greedy within 48 tokens with threshold 6.0 and with 0.0 (tiny random models
  match). lade decodes such models but warns; the drift is of the kind fp16 models show.
- AWQ (through gptqmodel, which transformers uses for `quant_method="awq"`): int4 weights with group
  scales and zeros; on the CPU a torch int4 matmul in the activation dtype; rows are independent.
- GGUF: transformers dequantizes the weights while loading, so the model is a plain float model.
Other methods are refused until they are tested here.
Half-precision models (fp16 / bf16 activations) match plain greedy only up to rounding: a near-tie in
the logits can flip between a one-token step and a many-token step, as for any fp16 model.
"""

from __future__ import annotations

import importlib.util
import warnings
from dataclasses import dataclass


@dataclass(frozen=True)
class Backend:
    package: str  # the module that runs the quantized layers
    extra: str  # the lade extra that installs it


BACKENDS = {
    "bitsandbytes": Backend("bitsandbytes", "bnb"),
    "awq": Backend("gptqmodel", "awq"),  # its torch kernels run on the CPU too
}
DEQUANTIZED_ON_LOAD = ("gguf",)
INT8_WARNING = (
    "bitsandbytes 8-bit quantizes activations, so lade's multi-token steps can round differently from plain "
    "one-token decoding and greedy output can drift from plain greedy (as with fp16); 4-bit (weight-only) "
    "bitsandbytes or AWQ decode identically"
)


def _installed(package: str) -> bool:
    return importlib.util.find_spec(package) is not None


def _field(quantization_config, name: str, default=None):
    if isinstance(quantization_config, dict):
        return quantization_config.get(name, default)
    return getattr(quantization_config, name, default)


def quantization_method(quantization_config) -> str | None:
    """The `quant_method` of a transformers quantization config (object, dict or None) as a plain string."""
    method = _field(quantization_config, "quant_method")
    return getattr(method, "value", method)


def require_backend(method: str) -> None:
    """Raise a clear error when lade does not support `method` or its backend is not installed."""
    if method in DEQUANTIZED_ON_LOAD:
        return
    if method not in BACKENDS:
        supported = sorted([*BACKENDS, *DEQUANTIZED_ON_LOAD])
        raise ValueError(f"quantization method {method!r} is not supported by lade (supported: {supported}); "
                         f"load the model without quantization or with one of those")
    backend = BACKENDS[method]
    if not _installed(backend.package):
        raise ImportError(f"{method} models need the '{backend.package}' package: pip install 'lade[{backend.extra}]'")


def check_quantized_model(model) -> None:
    """Called by `check_model`: nothing for plain models, a clear error for unsupported quantized ones."""
    quantization_config = getattr(model.config, "quantization_config", None)
    method = quantization_method(quantization_config)
    if method is None:
        return
    require_backend(method)
    if _field(quantization_config, "load_in_8bit"):
        warnings.warn(INT8_WARNING, stacklevel=2)
