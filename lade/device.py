"""What the machine running lade is, in words (recorded with latency profiles and results)."""

from __future__ import annotations

import platform
from pathlib import Path

import torch


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_description(device: torch.device | None = None) -> str:
    """e.g. "NVIDIA H100 80GB HBM3 (CUDA 12.8, 1 GPU)" or "AMD EPYC ... (2 threads)" for the CPU."""
    if torch.cuda.is_available() and (device is None or device.type == "cuda"):
        index = device.index if device is not None and device.index is not None else 0
        return f"{torch.cuda.get_device_name(index)} (CUDA {torch.version.cuda}, {torch.cuda.device_count()} GPU)"
    return f"{cpu_name()} ({torch.get_num_threads()} threads)"


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA kernels run asynchronously), so that a wall-clock time covers it."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
