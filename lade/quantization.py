"""Quantized models: which quantization methods lade decodes, and what to install for them.

lade runs the model's own forward on one fused step of many tokens. Greedy output equals plain greedy
token for token when a token's logits do not depend on how many tokens share its step; reduced-precision
activations break that at near-ties (a ~1e-3 rounding difference flips an argmax), as for any fp16 model.
- bitsandbytes computes activations in reduced precision: 8-bit (LLM.int8) casts them to fp16 and
  rounds them to int8 (with `llm_int8_threshold > 0` its fp16 outlier columns are even chosen over all
  tokens of the step); 4-bit (NF4 / FP4, double quantization) on the CPU runs a fused kernel in bf16
  whatever `bnb_4bit_compute_dtype` says, so a real model's greedy output may drift from plain greedy at
  near-ties. lade decodes these models and warns.
- AWQ (through gptqmodel, which transformers uses for `quant_method="awq"`): int4 weights with group
  scales and zeros; on the CPU a torch int4 matmul in the activation dtype; rows are independent.
- GGUF: transformers dequantizes the weights while loading, so the model is a plain float model.
Other methods are refused until they are tested here.
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
BNB_WARNING = (
    "bitsandbytes computes activations in reduced precision (8-bit: fp16 and int8; 4-bit on the CPU: bf16), so "
    "lade's multi-token steps can round differently from plain one-token decoding and greedy output can drift "
    "from plain greedy at near-ties, as with any fp16 model"
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
        raise ImportError(f"{method} models need the '{backend.package}' package: "
                          f"pip install 'lade-decoding[{backend.extra}]'")


def check_quantized_model(model) -> None:
    """Called by `check_model`: nothing for plain models, a clear error for unsupported quantized ones."""
    quantization_config = getattr(model.config, "quantization_config", None)
    method = quantization_method(quantization_config)
    if method is None:
        return
    require_backend(method)
    if method == "bitsandbytes":
        warnings.warn(BNB_WARNING, stacklevel=2)
