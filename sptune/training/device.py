"""Device and precision choices, CPU-safe by default, GPU paths used when present."""

from __future__ import annotations

import contextlib
import os
from contextlib import AbstractContextManager

import torch
from torch import nn


def pick_device(requested: str = "auto") -> torch.device:
    if requested == "cuda" or (requested == "auto" and torch.cuda.is_available()):
        return torch.device("cuda")
    return torch.device("cpu")


def trial_device(requested: str, gpus: float) -> str:
    """The device a trial that reserved ``gpus`` GPUs asks for: "auto" is the CPU without one. Recent Ray no
    longer hides GPUs from a trial that asked for none, and a CUDA context the scheduler does not know of
    would share a GPU it counts as free."""
    return "cpu" if requested == "auto" and gpus == 0 else requested


def precision_in_use(device: torch.device, precision: str = "auto") -> str:
    """What `precision` resolves to on `device`: "bf16" on GPUs that support it (auto) or when asked."""
    use_bf16 = precision == "bf16" or (precision == "auto" and device.type == "cuda" and torch.cuda.is_bf16_supported())
    return "bf16" if use_bf16 else "fp32"


def autocast(device: torch.device, precision: str = "auto", cache: bool = True) -> AbstractContextManager:
    """bf16 autocast where `precision_in_use` says so; fp32 otherwise. ``cache=False`` inside a CUDA graph's
    capture (PyTorch's rule: cached casts would outlive the capture)."""
    if precision_in_use(device, precision) == "bf16":
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16, cache_enabled=cache)
    return contextlib.nullcontext()


# cuBLAS needs a fixed workspace to be deterministic; read when the process first uses cuBLAS.
CUBLAS_WORKSPACE = ":4096:8"


def set_determinism(enabled: bool, device: torch.device) -> None:
    """PyTorch's deterministic algorithms and cuDNN's deterministic, non-benchmarked kernels, on or off (their
    defaults) for this process: set by every loop, so a Ray actor reused by the next trial never keeps another
    setting. On a GPU also cuBLAS's fixed workspace, unless the environment already names one."""
    torch.use_deterministic_algorithms(enabled)
    torch.backends.cudnn.deterministic = enabled
    if enabled:
        torch.backends.cudnn.benchmark = False
        if device.type == "cuda":
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)


def set_fp32_matmul(device: torch.device) -> None:
    """fp32 training on a GPU multiplies in TF32 (10-bit mantissa inputs, fp32 accumulation): several times
    the throughput on Ampere and newer, and well inside what SGD noise tolerates; PyTorch's default keeps
    full fp32 matmuls. Set by every loop on CUDA (process-wide, like determinism); bf16 runs are unaffected."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


def compiled(model: nn.Module, setting: bool | str, device: torch.device | None = None) -> nn.Module:
    """`training.compile`: False runs eager. True compiles with static shapes: the full batch and the tail batch
    get a graph each, where the default would recompile to slower dynamic-shape kernels at the tail.
    "cuda_graphs" on a GPU leaves the model eager: the loop captures the whole step, optimizer included, as one
    CUDA graph (sptune.training.step_graph); elsewhere, with no graphs to capture, it compiles as True does."""
    if not setting or (setting == "cuda_graphs" and device is not None and device.type == "cuda"):
        return model
    return torch.compile(model, dynamic=False)
