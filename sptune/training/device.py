"""Device and precision choices, CPU-safe by default, GPU paths used when present."""

from __future__ import annotations

import contextlib
from contextlib import AbstractContextManager

import torch


def pick_device(requested: str = "auto") -> torch.device:
    if requested == "cuda" or (requested == "auto" and torch.cuda.is_available()):
        return torch.device("cuda")
    return torch.device("cpu")


def precision_in_use(device: torch.device, precision: str = "auto") -> str:
    """What `precision` resolves to on `device`: "bf16" on GPUs that support it (auto) or when asked."""
    use_bf16 = precision == "bf16" or (precision == "auto" and device.type == "cuda" and torch.cuda.is_bf16_supported())
    return "bf16" if use_bf16 else "fp32"


def autocast(device: torch.device, precision: str = "auto") -> AbstractContextManager:
    """bf16 autocast where `precision_in_use` says so; fp32 otherwise."""
    if precision_in_use(device, precision) == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()
