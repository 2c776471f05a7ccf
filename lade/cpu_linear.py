"""oneDNN-packed linear layers for fp32 models on the CPU: what makes a wide lookahead step cheap there.

A decoding step of a few tokens is bound by reading the weights. PyTorch's default fp32 CPU linear (MKL) runs a
matrix-vector product for one token but a general product, with its own packing pass over the weights, for a few
tokens, so a step of 2 to 16 tokens costs far more than a step of one. oneDNN with weights packed once ahead of
time (what torch.compile's CPU freezing and IPEX do) costs about the same for 1 to 16 rows, and with oneDNN's AVX2
and AVX-512 kernels each row's result does not depend on how many rows the step feeds (oneDNN's choice for the CPU
at hand: tests/core/test_cpu_linear.py measures it). `pack_cpu_linears(model)` switches every plain nn.Linear of a CPU
fp32 model to it, in place and explicitly; plain decoding of the packed model is then as fast as or faster than
before, so benchmarks compare lookahead and plain decoding on the same packed model.

The packed copy of each weight (the size of the weight) is kept beside it and repacked whenever the weight changes
(replaced, modified in place, moved); a call with gradients, on another device or dtype, takes nn.Linear's path.
It is derived state: copying, pickling or saving a packed model leaves it out (oneDNN's opaque tensors have no
storage to copy), and the copy packs its own weights at its first forward.
"""

from __future__ import annotations

import torch
from torch import nn

PACKED_DTYPES = (torch.float32,)


class PackedLinear(nn.Linear):
    """nn.Linear whose inference forward runs oneDNN on a packed copy of the weight (same parameters, same
    state dict)."""

    _packed: torch.Tensor | None = None
    _packed_for: tuple | None = None
    _DERIVED = ("_packed", "_packed_for")  # rebuilt from the weight when needed

    def __getstate__(self) -> dict:
        """What copy.deepcopy, pickle and torch.save keep: the layer without its packed copy."""
        state = super().__getstate__()
        for name in self._DERIVED:
            state.pop(name, None)
        return state

    def _weight_key(self) -> tuple:
        weight = self.weight
        return weight.data_ptr(), weight._version, weight.dtype, weight.device, tuple(weight.shape)

    def packed_weight(self) -> torch.Tensor:
        key = self._weight_key()
        if self._packed_for != key:
            self._packed = torch.ops.mkldnn._reorder_linear_weight(self.weight.detach(), None)  # opaque oneDNN layout
            self._packed_for = key
        return self._packed

    def forward(self, input: torch.Tensor) -> torch.Tensor:  # input: [..., in] -> [..., out]
        weight = self.weight
        if (input.device.type != "cpu" or weight.device.type != "cpu" or input.dtype != weight.dtype
                or weight.dtype not in PACKED_DTYPES or (torch.is_grad_enabled() and weight.requires_grad)):
            return super().forward(input)
        return torch.ops.mkldnn._linear_pointwise(input, self.packed_weight(), self.bias, "none", [], "")


def cpu_linears_available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def pack_cpu_linears(model: nn.Module) -> nn.Module:
    """Run every plain nn.Linear of `model` (a CPU model with fp32 linear weights) through oneDNN with packed
    weights, in place -> the model. Subclasses of nn.Linear (quantized layers) are left alone; the parameters,
    tied weights, hooks and state dict stay as they were. `unpack_cpu_linears` undoes it."""
    if not cpu_linears_available():
        raise RuntimeError("pack_cpu_linears needs a PyTorch build with oneDNN (torch.backends.mkldnn); this one has "
                           "none: decode the model as it is")
    linears = [m for m in model.modules() if type(m) is nn.Linear]
    if not linears:
        raise ValueError(f"{type(model).__name__} has no plain nn.Linear layers to pack")
    where = {(m.weight.device.type, m.weight.dtype) for m in linears}
    if any(device != "cpu" or dtype not in PACKED_DTYPES for device, dtype in where):
        found = ", ".join(sorted(f"{device} {str(dtype).removeprefix('torch.')}" for device, dtype in where))
        raise ValueError(f"pack_cpu_linears packs CPU float32 linear weights; this model's are {found}. On a GPU "
                         "or in half precision, decode the model as it is")
    for module in linears:
        module.__class__ = PackedLinear  # same object, same parameters: only the forward changes
    return model


def unpack_cpu_linears(model: nn.Module) -> nn.Module:
    """Back to plain nn.Linear layers (drops the packed copies) -> the model."""
    for module in model.modules():
        if type(module) is PackedLinear:
            for name in PackedLinear._DERIVED:
                module.__dict__.pop(name, None)
            module.__class__ = nn.Linear
    return model


def packed_linear_count(model: nn.Module) -> int:
    return sum(type(m) is PackedLinear for m in model.modules())
