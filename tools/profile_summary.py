"""Summarise a py-spy ``--format raw`` profile (collapsed stacks) of a sweep by process and activity.

py-spy samples only threads that are running Python (idle threads are skipped unless
``--idle``), so samples are roughly CPU time. Each stack is assigned to the first activity
in ACTIVITIES whose pattern occurs in it (checkpoint saving before training, because saving
happens inside a Tune step), and to the process it was sampled in (driver, trial actor, other).

Record the driver only: with ``--subprocesses`` py-spy 0.4 on this machine attaches to Ray's
workers but loses nearly all samples of the actor threads that train (its "Errors" count), so
actor time is better read from benchmarks/sweep_overhead.py's per-process CPU seconds (/proc).

    py-spy record --format raw -r 50 -o benchmarks/results/sweep_profile.txt -- \
        python benchmarks/sweep_overhead.py --layouts serial
    python tools/profile_summary.py benchmarks/results/sweep_profile.txt \
        --json benchmarks/results/sweep_profile.json
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

# Table and JSON output shared with the benchmarks whose profiles this reads.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_common as bc  # noqa: E402

ACTIVITIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("imports (process start)", ("_find_and_load",)),
    ("checkpoint save/restore", ("save_checkpoint (sptune/", "load_checkpoint (sptune/", "torch/serialization.py")),
    ("plain arm: training", ("plain_trial (",)),
    ("trial: training step", ("train_epoch (sptune/training/loops.py",)),
    ("trial: validation", ("validate (sptune/training/loops.py",)),
    ("trial: build model/loop", ("_build (sptune/tuning/trainable.py", "setup (sptune/tuning/trainable.py")),
    ("MLflow logging", ("mlflow/",)),
    ("Optuna", ("optuna/",)),
    ("final test evaluation", ("final_evaluation (sptune/",)),
    ("Tune controller / trial bookkeeping", ("ray/tune/", "ray/train/")),
    ("Ray core (RPC, object store)", ("ray/_private/", "ray/_raylet", "ray/actor.py", "ray/util/")),
)
PROCESS = re.compile(r'process (\d+):"([^"]*)"')


def parse(path: Path) -> list[tuple[str, str, int]]:
    """(process label of the innermost process, stack text, samples) per line."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        procs = PROCESS.findall(stack)
        label = procs[-1][1] if procs else "driver"  # without --subprocesses only the driver is sampled
        out.append((label, stack, int(count)))
    return out


def process_kind(label: str, root_label: str) -> str:
    if "Trainable" in label or "ImplicitFunc" in label or "default_worker.py" in label:
        return "trial actor"
    if label == root_label:
        return "driver"
    if "ForkPoolWorker" in label or "multiprocessing" in label or "spawn_main" in label:
        return "plain pool worker"
    return "other (ray agents, monitors)"


def activity(stack: str) -> str:
    for name, patterns in ACTIVITIES:
        if any(p in stack for p in patterns):
            return name
    return "other"


def summarize(rows: list[tuple[str, str, int]]) -> dict[str, dict[str, int]]:
    root = rows[0][1].split(";")[0] if rows else ""
    root_label = PROCESS.findall(root)[0][1] if PROCESS.findall(root) else "driver"
    table: dict[str, Counter] = {}
    for label, stack, n in rows:
        table.setdefault(process_kind(label, root_label), Counter())[activity(stack)] += n
    return {k: dict(v.most_common()) for k, v in table.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profile", type=Path)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    table = summarize(parse(args.profile))
    total = sum(sum(v.values()) for v in table.values())
    rows = [(proc, act, n, f"{100 * n / total:.1f}%") for proc, acts in table.items() for act, n in acts.items()]
    bc.print_table(["process", "activity", "samples", "share"], sorted(rows, key=lambda r: -r[2]))
    bc.write_json(args.json, {"profile": str(args.profile), "total_samples": total, "by_process": table})
    return 0


if __name__ == "__main__":
    sys.exit(main())
