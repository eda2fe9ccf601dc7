"""How many trials run at once: the CPU and GPU shares a cluster, or this machine, holds. This machine's GPUs
are counted as a local Ray instance counts them, without importing torch or Ray (a dry run plans without
either): the NVIDIA driver's device list, narrowed by CUDA_VISIBLE_DEVICES."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
from pathlib import Path

from sptune.spec import SweepSpec

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


def concurrency(spec: SweepSpec, cluster_cpus: float | None = None, cluster_gpus: float | None = None) -> int:
    """Trials that run at once: as many as the CPUs hold and, for trials that reserve a GPU share, as many as the
    GPUs hold (Ray starts a trial only where both fit), at most `resources.max_concurrent`. Counted on this
    machine where no cluster is given. At least 1 (a run without the GPUs it asks for is refused by preflight)."""
    res = spec.resources
    cpus = cluster_cpus if cluster_cpus is not None else (os.cpu_count() or 1)
    fits = _shares(cpus, res.cpu)
    if res.gpu > 0:
        fits = min(fits, _shares(cluster_gpus if cluster_gpus is not None else local_gpus(), res.gpu))
    fits = max(1, fits)
    return min(fits, res.max_concurrent or fits)


def _shares(total: float, share: float) -> int:
    # Ray counts resources in fixed point (1e-4): 0.3 / 0.1 is 3 shares there, not 2.999....
    return math.floor(total / share + 1e-6)
