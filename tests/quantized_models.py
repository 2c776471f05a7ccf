"""Tiny quantized causal LMs for tests: a tiny random model saved once, reloaded through transformers'
own quantizers (bitsandbytes), or written as an AWQ GEMM checkpoint with gptqmodel's packer."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

from tiny_models import tiny_model

SIZES = dict(hidden_size=64, intermediate_size=128)  # bitsandbytes' CPU 4-bit layout needs in_features >= 64
AWQ_GROUP_SIZE = 32  # divides in_features (64, 128)


def save_tiny(folder: Path, arch: str = "llama") -> Path:
    tiny_model(arch, **SIZES).save_pretrained(folder)
    return folder


def load_quantized(folder: Path, quantization_config=None, dtype: torch.dtype = torch.float32):
    """Quantize while loading with `quantization_config`, or (None) load the folder's own quantized checkpoint."""
    quantize = {"quantization_config": quantization_config} if quantization_config is not None else {}
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype, attn_implementation="sdpa", device_map="cpu",
                                                 **quantize)
    return model.eval()


def _awq_group_params(weight: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Round-to-nearest asymmetric 4-bit groups along in_features: (scales, zeros), each [out, in / group]."""
    groups = weight.reshape(weight.shape[0], -1, group_size)  # [out, in / g, g]
    low, high = groups.amin(-1), groups.amax(-1)
    scales = ((high - low) / 15).clamp(min=1e-5)
    zeros = (-low / scales).round().clamp(0, 15)
    return scales.half(), zeros


def save_tiny_awq(folder: Path, arch: str = "llama") -> Path:
    """An AWQ (GEMM format, 4 bit, zero point) checkpoint of a tiny random model.

    The scales come from round-to-nearest, not from AWQ's activation-aware search: the decoding path (the
    AWQ kernel and lade's step) does not depend on how the scales were chosen.
    """
    from gptqmodel.nn_modules.qlinear.torch_awq import AwqTorchLinear

    model = tiny_model(arch, **SIZES)
    state = {name: tensor.half() for name, tensor in model.state_dict().items()}
    for name, module in model.named_modules():
        if not isinstance(module, torch.nn.Linear) or name == "lm_head":
            continue
        packed = AwqTorchLinear(bits=4, group_size=AWQ_GROUP_SIZE, sym=False, desc_act=False,
                                in_features=module.in_features, out_features=module.out_features,
                                bias=module.bias is not None)
        packed.pack(module, *_awq_group_params(module.weight.data, AWQ_GROUP_SIZE))
        del state[f"{name}.weight"]
        for buffer in ("qweight", "qzeros", "scales"):
            state[f"{name}.{buffer}"] = getattr(packed, buffer).contiguous()
    model.config.quantization_config = {"quant_method": "awq", "bits": 4, "group_size": AWQ_GROUP_SIZE,
                                        "zero_point": True, "version": "gemm"}
    model.config.save_pretrained(folder)
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def hide_packages(monkeypatch, *packages: str) -> None:
    """Make `packages` uninstalled for one test: importlib finds no spec for a module whose sys.modules entry is None
    (the environment changes, not lade)."""
    import sys

    for package in packages:
        monkeypatch.setitem(sys.modules, package, None)
