"""The MLflow half of driver_scale.py, without Ray: sptune's TrialRunLogger fed N trials x E epochs.

The callback's hooks are called exactly as Tune's driver calls them (start, one result per epoch,
complete, experiment end), `--concurrency` trials at a time with their epochs interleaved, on a
real MLflow SQLite store (and a real `mlflow server` with `--http`). Per arm it measures the
callback's wall and CPU time per result and MLflow writes (calls on its MlflowClient, counted by
a wrapper around that client): what the callback alone costs the driver, with no Ray running.

    python benchmarks/mlflow_writes.py --json benchmarks/results/mlflow_writes.json
    python benchmarks/mlflow_writes.py --trials 200 --epochs 50 --http
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import bench_common as bc
from driver_scale import CountingClient, NoOpTrainable, check_runs, mlflow_server


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def feed(logger: Any, trials: int, epochs: int, concurrency: int) -> int:
    """Tune's callback calls for `trials` no-op trials, `concurrency` at a time; returns the results fed."""
    results = 0
    for first in range(0, trials, concurrency):
        group = [
            SimpleNamespace(
                trial_id=f"t{i:05d}", config={"phase": "search", "variant": "scratch", "lr": 1e-3 + i * 1e-6}
            )
            for i in range(first, min(trials, first + concurrency))
        ]
        noops = []
        for t in group:
            logger.on_trial_start(0, group, t)
            noop = NoOpTrainable.__new__(NoOpTrainable)  # its step() only: no Ray actor
            noop._start(t.config)
            noops.append(noop)
        for _ in range(epochs):
            for t, noop in zip(group, noops, strict=True):
                logger.on_trial_result(0, group, t, noop.step())
                logger.on_step_end(0, group)
                results += 1
        for t in group:
            logger.on_trial_complete(0, group, t)
    logger.on_experiment_end([])
    return results


def run_arm(name: str, uri: str, folder: Path, args: argparse.Namespace) -> dict[str, Any]:
    from sptune.tracking.mlflow_tracker import Tracker, TrialRunLogger

    tracker = Tracker(uri, f"mlflow-writes-{name}", folder)
    tracker.start_parent(name, {"arm": name})
    tracker.client = counting = CountingClient(tracker.client)
    batching = {"flush_results": 1} if name.endswith("-1") else {}
    logger = TrialRunLogger(tracker, {"scratch": {"variant": "scratch"}}, **batching)
    print(f"[{name}] {args.trials} trials x {args.epochs} epochs ...", flush=True)
    cpu0, start = _cpu(), time.perf_counter()
    results = feed(logger, args.trials, args.epochs, args.concurrency)
    wall, cpu = time.perf_counter() - start, _cpu() - cpu0
    return {
        "results": results,
        "wall_s": wall,
        "results_per_s": results / wall,
        "cpu_ms_per_result": 1000 * cpu / results,
        "writes": counting.writes(),
        "writes_per_result": counting.writes() / results,
        "writes_per_s": counting.writes() / wall,
        "write_calls": dict(counting.calls),
        "check": check_runs(counting._client, tracker.experiment_id, args.epochs),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--epochs", type=int, default=50)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--http", action="store_true", help="also a real mlflow server on 127.0.0.1")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    out: dict[str, Any] = {"machine": bc.machine(), "args": vars(args) | {"json": str(args.json)}, "arms": {}}
    with bc.temp_dir("mlflow-writes") as tmp:
        root = Path(tmp)
        for name in ("sqlite", "sqlite-1"):
            (root / name).mkdir()
            out["arms"][name] = run_arm(name, f"sqlite:///{root / name / 'mlflow.db'}", root / name, args)
        if args.http:
            proc, uri = mlflow_server(root)
            try:
                for name in ("http", "http-1"):
                    out["arms"][name] = run_arm(name, uri, root, args)
            finally:
                proc.terminate()
                proc.wait(30)
    rows = [
        (k, a["results"], a["wall_s"], a["results_per_s"], a["cpu_ms_per_result"], a["writes"], a["writes_per_result"])
        for k, a in out["arms"].items()
    ]
    bc.print_table(["arm", "results", "wall s", "results/s", "CPU ms/result", "writes", "writes/result"], rows)
    arms = out["arms"]
    for batched in ("sqlite", "http"):
        if batched in arms:
            speedup = arms[batched]["results_per_s"] / arms[f"{batched}-1"]["results_per_s"]
            out[f"{batched}_batched_speedup"] = speedup
            print(f"{batched}: batched writes handle {speedup:.1f}x the results/s of one write per result")
    bc.write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
