"""Device and precision choices, CPU-safe by default, GPU paths used when present."""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager

import torch


def pick_device(requested: str = "auto") -> torch.device:
    if requested == "cuda" or (requested == "auto" and torch.cuda.is_available()):
        return torch.device("cuda")
    return torch.device("cpu")


def autocast(device: torch.device, precision: str = "auto") -> AbstractContextManager:
    """bf16 autocast on GPUs that support it (auto) or when asked; fp32 otherwise."""
    use_bf16 = precision == "bf16" or (precision == "auto" and device.type == "cuda" and torch.cuda.is_bf16_supported())
    if use_bf16:
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()
