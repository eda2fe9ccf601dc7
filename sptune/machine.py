"""What this machine has: its visible GPUs, counted as a local Ray instance counts them, without importing torch
or Ray (a spec is read, and a dry run plans, without either): the NVIDIA driver's device list, narrowed by
CUDA_VISIBLE_DEVICES. Imports nothing of sptune, so the spec and the plan can both ask."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

NVIDIA_GPUS = Path("/proc/driver/nvidia/gpus")  # one entry per GPU where the NVIDIA driver is loaded (Linux)


def _detected_gpus() -> int:
    if NVIDIA_GPUS.is_dir():
        return sum(1 for _ in NVIDIA_GPUS.iterdir())
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        listing = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(1 for line in listing.splitlines() if line.startswith("GPU "))


def visible_gpus(detected: int, cuda_visible_devices: str | None) -> int:
    """GPUs a process sees: ``detected``, at most those CUDA_VISIBLE_DEVICES lists (as Ray counts them;
    CUDA stops at the first invalid entry, so "-1" or "" hides every GPU)."""
    if cuda_visible_devices is None:
        return detected
    listed = 0
    for entry in cuda_visible_devices.split(","):
        entry = entry.strip()
        if not entry or entry.startswith("-"):
            break
        listed += 1
    return min(detected, listed)


def local_gpus() -> int:
    return visible_gpus(_detected_gpus(), os.environ.get("CUDA_VISIBLE_DEVICES"))


def local_cpus() -> int:
    """CPUs a local Ray instance offers (sptune.study.ray_session starts it with os.cpu_count())."""
    return os.cpu_count() or 1
