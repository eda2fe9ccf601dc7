"""The device machine as call A finds it: GPU, driver, Python, torch and CUDA, and which scaled_dot_product_attention
backends run, and how fast, at sptune's CIFAR shape (head size 16, 1,024 tokens, bf16). Needs torch only.

    python3 tools/device/env_report.py --json env_report.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import subprocess
import sys
import time
from typing import Any

import torch

# CIFAR-LRA with d64 and 4 heads (sptune's Image config): batch 32, 4 heads, 1,024 tokens, head size 16.
SHAPE = (32, 4, 1024, 16)


def nvidia_smi() -> dict[str, str]:
    fields = "name,driver_version,memory.total,clocks.max.sm,power.limit"
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError) as e:
        return {"error": f"{type(e).__name__}: {e}"}
    return dict(zip(fields.split(","), (v.strip() for v in out.splitlines()[0].split(",")), strict=False))


def versions() -> dict[str, Any]:
    found: dict[str, Any] = {"python": platform.python_version(), "executable": sys.executable,
                             "torch": torch.__version__, "cuda": torch.version.cuda,
                             "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
                             "cuda_available": torch.cuda.is_available()}
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        found.update(device=p.name, capability=f"{p.major}.{p.minor}", multiprocessors=p.multi_processor_count,
                     memory_gib=round(p.total_memory / 2**30, 1))
    return found


def time_backend(backend: Any, repeats: int = 10) -> dict[str, Any]:
    """Forward + backward of one SDPA call at SHAPE in bf16 with only `backend` allowed (None: PyTorch's pick),
    after one untimed call; mean milliseconds over `repeats`."""
    from torch.nn.attention import sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    q, k, v = (torch.randn(SHAPE, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    try:
        with contextlib.nullcontext() if backend is None else sdpa_kernel([backend]):
            sdpa(q, k, v).sum().backward()
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(repeats):
                sdpa(q, k, v).sum().backward()
            torch.cuda.synchronize()
    except RuntimeError as e:  # "No available kernel": the backend refuses this shape or dtype
        return {"runs": False, "error": str(e).splitlines()[0][:300]}
    return {"runs": True, "fwd_bwd_ms": round((time.perf_counter() - start) / repeats * 1e3, 3)}


def sdpa_backends() -> dict[str, Any]:
    if not torch.cuda.is_available():
        return {"skipped": "no CUDA device"}
    from torch.nn.attention import SDPBackend

    names = ("FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION", "MATH")
    found = {name: time_backend(getattr(SDPBackend, name)) for name in names if hasattr(SDPBackend, name)}
    found["default"] = time_backend(None)
    found["shape"] = {"batch": SHAPE[0], "heads": SHAPE[1], "tokens": SHAPE[2], "head_dim": SHAPE[3], "dtype": "bf16"}
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write the report here too")
    args = ap.parse_args(argv)
    report = {"nvidia_smi": nvidia_smi(), "versions": versions(), "sdpa_head_dim_16": sdpa_backends()}
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        with open(args.json, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
