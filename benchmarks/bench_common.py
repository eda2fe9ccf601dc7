"""Helpers shared by the benchmark scripts (not a benchmark itself).

Everything here is small on purpose: Ray start/stop with the loopback settings the
benchmarks agree on, spec building from a YAML file plus edits, a /proc CPU-time sampler
that attributes CPU seconds to Ray's processes, and table/JSON output.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
SPECS = REPO / "search_spaces"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def quiet_env() -> None:
    # Tune warns about slow experiment-checkpoint syncs on a busy 2-core box; the warning itself costs time.
    os.environ["TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S"] = "0"
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")


def start_ray(num_cpus: int = 2) -> float:
    """Start a local Ray instance (loopback only); returns the seconds ray.init took."""
    import ray

    start = time.perf_counter()
    ray.init(num_cpus=num_cpus, include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    return time.perf_counter() - start


def stop_ray() -> float:
    import ray

    start = time.perf_counter()
    ray.shutdown()
    return time.perf_counter() - start


# ------------------------------------------------------------------ specs

def spec_dict(path: str | Path, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """The spec YAML as a dict with ``--set`` style overrides applied (validated later)."""
    from sptune.spec import apply_override, read_yaml

    data = read_yaml(path)
    for assignment in overrides:
        apply_override(data, assignment)
    return data


def only_variants(data: dict[str, Any], keep: Iterable[str]) -> dict[str, Any]:
    """Drop variants not in ``keep`` (and pretraining when nothing needs it)."""
    keep = set(keep)
    data["variants"] = {k: v for k, v in data["variants"].items() if k in keep}
    if all((v.get("kind") or k) == "scratch" for k, v in data["variants"].items()):
        data.pop("pretrain", None)
    return data


def write_spec(data: dict[str, Any], folder: Path, name: str = "spec.yaml") -> Path:
    """Write an edited spec where `sptune.sweep.main` can read it (a temp dir, never the repo)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def load_data(spec: Any, data_dir: str | None) -> Any:
    from sptune.tasks import TaskRequest, load_task
    from sptune.tasks.registry import resolve_data_dir

    return load_task(TaskRequest(spec.task.name, spec.task.options, spec.seed, resolve_data_dir(data_dir)))


def temp_dir(prefix: str) -> tempfile.TemporaryDirectory:
    return tempfile.TemporaryDirectory(prefix=f"sptune-bench-{prefix}-")


# ------------------------------------------------------------------ /proc CPU accounting

def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def descendants(root: int) -> list[int]:
    kids, out, todo = _children_map(), [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(kids.get(pid, []))
    return out


def _cpu_and_name(pid: int) -> tuple[float, str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return None
    # utime and stime are fields 14 and 15 of stat (11 and 12 after the comm field).
    return (int(fields[11]) + int(fields[12])) / CLK_TCK, cmd


def process_role(pid: int, cmd: str, root: int) -> str:
    """Which part of the system a process is, from its (Ray-retitled) command line."""
    if pid == root:
        return "driver (Tune loop, MLflow, selection)"
    for key, role in (("gcs_server", "ray gcs_server"), ("raylet", "ray raylet"),
                      ("Trainable", "trial actors (training)"), ("ImplicitFunc", "trial actors (training)"),
                      ("ray::IDLE", "idle ray workers"),
                      ("default_worker", "idle ray workers")):
        if key in cmd:
            return role
    return "other ray processes (agents, log monitor)"


class CpuSampler:
    """Samples CPU seconds of this process and all its descendants every `period` seconds.

    Ray actors exit when a Tuner finishes, so the last value seen per pid is kept; the total
    per role then says where the machine's CPU went while a sweep ran.
    """

    def __init__(self, period: float = 0.5) -> None:
        self.root, self.period = os.getpid(), period
        self.first: dict[int, float] = {}
        self.last: dict[int, tuple[float, str]] = {}
        self._stop = threading.Event()
        self._baseline = True
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _sample(self) -> None:
        for pid in descendants(self.root):
            got = _cpu_and_name(pid)
            if got is None:
                continue
            # Processes born during the window spent all their CPU time inside it.
            self.first.setdefault(pid, got[0] if self._baseline else 0.0)
            # An exiting process has an empty cmdline: keep the name it had while alive.
            name = got[1] or self.last.get(pid, (0.0, ""))[1]
            self.last[pid] = (got[0], name)

    def _run(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.period)

    def __enter__(self) -> CpuSampler:
        self._sample()
        self._baseline = False
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()

    def total(self) -> float:
        return sum(cpu - self.first.get(pid, 0.0) for pid, (cpu, _) in self.last.items())

    def by_role(self) -> dict[str, float]:
        roles: dict[str, float] = {}
        for pid, (cpu, cmd) in self.last.items():
            role = process_role(pid, cmd, self.root)
            roles[role] = roles.get(role, 0.0) + cpu - self.first.get(pid, 0.0)
        return dict(sorted(roles.items(), key=lambda kv: -kv[1]))


# ------------------------------------------------------------------ output

def machine() -> dict[str, Any]:
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"cpus": os.cpu_count(), "gpu": gpu, "torch": torch.__version__, "python": sys.version.split()[0],
            "platform": platform.platform(), "load_avg_at_start": os.getloadavg()}


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], widths: Sequence[int] | None = None) -> None:
    rows = [[_fmt(v) for v in r] for r in rows]
    widths = widths or [max(len(str(h)), *(len(r[i]) for r in rows)) + 2 for i, h in enumerate(headers)]
    print("".join(f"{h:<{w}}" if i == 0 else f"{h:>{w}}" for i, (h, w) in enumerate(zip(headers, widths, strict=True))))
    for r in rows:
        print("".join(f"{v:<{w}}" if i == 0 else f"{v:>{w}}" for i, (v, w) in enumerate(zip(r, widths, strict=True))))


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e5 else f"{v:.3e}"
    return str(v)


def finish(path: Path | None, out: dict[str, Any], start: float) -> int:
    """A benchmark's last step: its wall time since `start` (perf_counter), printed and kept, then its JSON."""
    out["wall_s"] = time.perf_counter() - start
    print(f"\nwall {out['wall_s']:.0f} s")
    write_json(path, out)
    return 0


def write_json(path: Path | None, out: dict[str, Any]) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    # Other jobs share this machine: the load around a run is part of reading its numbers.
    out = {**out, "load_avg_at_end": os.getloadavg()}
    path.write_text(json.dumps(out, indent=2, default=str))
    print(f"wrote {path}")


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start
