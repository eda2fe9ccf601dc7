"""Resident memory per extra concurrent trial: does every trial hold its own copy of the data?

For each task, the study's own Tuner (`sptune.tuning.tuner.staged_search` + `build_study_tuner`
over a one-stage plan: tune.with_parameters + StudyTrainable, FIFO, a grid of N learning rates)
runs N = 1, 2, 4 trials at once on this node. Each trial builds its loop exactly as a sweep does (setup ->
FinetuneLoop over the shipped splits), takes a few optimiser steps with a tiny model, reads
every row of its train/val tensors (as any epoch does; pages never read cost nothing either
way), then waits at a file barrier while this driver reads /proc/<pid>/smaps_rollup of every
trial actor:

  USS   Private_Clean + Private_Dirty: what the process alone costs (freed if it exits)
  PSS   shared pages split fairly among the processes mapping them
  store Rss of the actor's mappings of Ray's shared-memory object store (/dev/shm/plasma*)

"per extra trial" = (sum over actors at N=max - sum at N=1) / (max - 1), for USS and PSS, and
for the PSS of the whole node (this driver and every Ray process it started). Two modes, each
in its own Ray session: "before" ships the data as sptune once did (the splits as
loaded; ListOps from the prepared cache is an np.memmap, which pickles in band, so every trial
unpickled its own copy; a Tuner put its own copy into the store), "after" ships them through
`sptune.tuning.tuner.trial_data` (one plain-ndarray object per session; trials map it zero-copy).

Data: ListOps generated at LRA size (96k train / 2k val, lengths 500-2000, 2,000 tokens, int16
after compaction: 366 MiB of train tokens) read from the prepared cache, which `prepare` fills
on the first run (minutes; later runs memory-map it); Image = CIFAR-10 gray 45k x 1,024 uint8
from --data-dir (cifar10_gray.npz), or a random array of that shape with --synthetic.

    python benchmarks/memory.py --data-dir /work/shared/data --json benchmarks/results/memory.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import bench_common as bc
import numpy as np

LISTOPS_GEN = {
    "gen_n_train": 96_000,
    "gen_n_val": 2_000,
    "gen_n_test": 2_000,
    "gen_min_len": 500,
    "gen_max_len": 2_000,
    "gen_max_depth": 10,
    "max_len": 2_000,
}
TINY_MODEL = {"d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 32, "dropout": 0.0, "pooling": "mean"}
TRAIN_STEPS = 2
BATCH = 2  # one ListOps row is 2,000 tokens: the batch is part of a trial's cost, keep it small
BARRIER_TIMEOUT_S = 300.0
MB = 2**20  # every *_mb number is in MiB, as /proc reports kB = KiB


# ------------------------------------------------------------------ data


def listops_data(n_train: int) -> Any:
    """Generated ListOps at LRA lengths, through the prepared cache (filled on first use)."""
    from sptune.tasks import TaskRequest, load_task
    from sptune.tasks.prepared import preparing

    request = TaskRequest("listops", {**LISTOPS_GEN, "gen_n_train": n_train}, 0, None)
    with preparing():  # writes the cache once; a prepared study reads it memory-mapped, as here
        load_task(request)
    return load_task(request)


def image_data(data_dir: str | None, synthetic: bool) -> Any:
    from sptune.tasks import TaskRequest, load_task
    from sptune.tasks.base import ArraySplit, TaskInfo, TaskSplits, _no_test_in_trials
    from sptune.tasks.registry import resolve_data_dir

    if not synthetic:
        return load_task(TaskRequest("image", {}, 0, resolve_data_dir(data_dir)))
    rng = np.random.default_rng(0)

    def split(n: int) -> ArraySplit:
        return ArraySplit(rng.integers(0, 256, (n, 1024), dtype=np.uint8), rng.integers(0, 10, n))

    info = TaskInfo(name="image", input_kind="continuous", seq_len=1024, num_classes=10, levels=256)
    return TaskSplits(info, split(45_000), split(5_000), _no_test_in_trials, source="synthetic 45k x 1024 uint8")


def dataset_bytes(data: Any) -> int:
    return sum(a.nbytes for s in (data.train, data.val) for a in (s.x, s.y))


# ------------------------------------------------------------------ the trial


def probe_class(barrier: str) -> type:
    """StudyTrainable that trains a few steps, reads all its data, then waits at the barrier.

    Made here and shipped by value (Ray's workers cannot import this script); the only thing it
    changes is step(), so the data reach the loop exactly as in a sweep.
    """
    from sptune.training.epoch_sums import EpochSums
    from sptune.tuning.trainable import CHECKPOINT_RANK, StudyTrainable

    class MemoryProbe(StudyTrainable):
        def step(self) -> dict:
            loop, sums = self.loop, EpochSums(self.loop.device)
            for _ in range(TRAIN_STEPS):
                loop.train_step(sums)
            # Every page of the splits, read through the loop's own tensors.
            checksum = sum(int(t.sum()) for t in (loop.train_x, loop.train_y, loop.val_x, loop.val_y))
            folder = Path(barrier)
            (folder / f"ready-{os.getpid()}").write_text(str(checksum))
            deadline = time.time() + BARRIER_TIMEOUT_S
            while not (folder / "release").exists() and time.time() < deadline:
                time.sleep(0.1)
            return {
                "val_acc": 0.0,
                "best_val_acc": 0.0,
                "val_loss": 0.0,
                "epoch": 1,
                "best_epoch": 1,
                "done": True,
                "checksum": checksum,
                CHECKPOINT_RANK: 1,  # the study Tuner's metric: every result carries it
            }

    return MemoryProbe


# ------------------------------------------------------------------ /proc


def smaps(pid: int) -> dict[str, float]:
    """USS, PSS, RSS and the object-store pages (MiB) of one process."""
    totals = {"rss": 0.0, "pss": 0.0, "uss": 0.0, "store_rss": 0.0}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            key, _, value = line.partition(":")
            kb = float(value.split()[0]) if value.split() and value.split()[0].isdigit() else 0.0
            if key in ("Rss", "Pss"):
                totals[key.lower()] += kb / 1024
            elif key in ("Private_Clean", "Private_Dirty"):
                totals["uss"] += kb / 1024
    in_store = False
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            head = line.split()
            if head and "-" in head[0] and not head[0].endswith(":"):
                in_store = len(head) > 5 and "plasma" in head[5]
            elif in_store and head and head[0] == "Rss:":
                totals["store_rss"] += float(head[1]) / 1024
    return totals


def node_pss() -> float:
    """PSS (MiB) of this driver and every process it started (Ray's too): the node's bill."""
    total = 0.0
    for pid in bc.descendants(os.getpid()):
        try:
            total += smaps(pid)["pss"]
        except (OSError, ValueError):
            continue  # a process that exited while we read
    return total


def sample_at_barrier(barrier: Path, n: int, out: dict[str, Any]) -> None:
    """Wait until `n` trials are at the barrier, read their memory 3 times, release them."""
    deadline = time.time() + BARRIER_TIMEOUT_S
    released = barrier / "release"  # written by run_tuner if the Tuner ends first (an error)
    while len(list(barrier.glob("ready-*"))) < n and time.time() < deadline and not released.exists():
        time.sleep(0.2)
    pids = sorted(int(p.name.split("-")[1]) for p in barrier.glob("ready-*"))
    samples: list[dict[int, dict[str, float]]] = []
    nodes = []
    for _ in range(3):
        time.sleep(0.5)
        samples.append({pid: smaps(pid) for pid in pids})
        nodes.append(node_pss())
    released.write_text("")
    keys = ("rss", "pss", "uss", "store_rss")
    out["actors"] = [{k: statistics.median(s[pid][k] for s in samples) for k in keys} for pid in pids]
    out["node_pss_mb"] = statistics.median(nodes)
    out["checksums"] = sorted({(barrier / f"ready-{pid}").read_text() for pid in pids})


# ------------------------------------------------------------------ one Tuner, one session


def spec_for(task: str, n: int) -> Any:
    """A scratch search of `n` grid points, all running at once (0.5 CPU each: 4 fit on 2 cores)."""
    from sptune.spec import from_dict

    search = {
        "lr": {"type": "grid", "values": [1e-3 * (i + 1) for i in range(n)]},
        "batch_size": {"type": "choice", "values": [BATCH]},
    }
    return from_dict(
        {
            "name": f"memory-{task}-{n}",
            "seed": 0,
            "task": {"name": task},
            "model": TINY_MODEL,
            "finetune": {"epochs": 1},
            "variants": {"scratch": {"search": search}},
            "scheduler": {"type": "fifo"},
            "rerun_seeds": 1,
            "resources": {"cpu": 0.5, "gpu": 0, "max_concurrent": n},
            "training": {"device": "cpu"},
        }
    )


def run_tuner(data: Any, n: int, storage: str) -> dict[str, Any]:
    """N concurrent probe trials through the study's Tuner; their memory at the barrier."""
    import sptune.tuning.tuner
    from sptune.judging.stage_graph import Stage
    from sptune.plan.study_plan import build_plan

    spec = spec_for(data.info.name, n)
    plan = build_plan(spec, data.info, cluster_cpus=2)
    search = plan.variant_searches()[0]
    barrier = Path(tempfile.mkdtemp(prefix="barrier-", dir=storage))
    out: dict[str, Any] = {"n": n}
    original = sptune.tuning.tuner.StudyTrainable
    sptune.tuning.tuner.StudyTrainable = probe_class(str(barrier))
    sampler = threading.Thread(target=sample_at_barrier, args=(barrier, n, out))
    try:
        searcher, scheduler = sptune.tuning.tuner.staged_search(plan, [Stage(search)], {}, {})
        experiment = str(Path(storage) / f"memory{n}")  # each N its own Tuner folder
        tuner = sptune.tuning.tuner.build_study_tuner(plan, data, searcher, scheduler, experiment, [])
        sampler.start()
        start = time.perf_counter()
        grid = tuner.fit()
        out["fit_s"] = time.perf_counter() - start
        out["errors"] = len(grid.errors)
    finally:
        (barrier / "release").write_text("")  # never leave a trial waiting
        if sampler.is_alive():
            sampler.join()
        sptune.tuning.tuner.StudyTrainable = original
    return out


def old_shipping() -> None:
    """What sptune once shipped: the splits as loaded, put into the store per Tuner."""
    import sptune.tuning.tuner
    from sptune.tasks.base import TaskSplits, _no_test_in_trials

    def as_loaded(self: TaskSplits) -> TaskSplits:
        return TaskSplits(self.info, self.train, self.val, _no_test_in_trials, self.source)

    TaskSplits.without_test = as_loaded
    if hasattr(sptune.tuning.tuner, "trial_data"):  # absent on the old tree itself
        sptune.tuning.tuner.trial_data = lambda data: data.without_test()


def run_mode(data: Any, mode: str, concurrency: list[int]) -> list[dict[str, Any]]:
    import sptune.tasks.base
    import sptune.tuning.tuner

    saved = (sptune.tasks.base.TaskSplits.without_test, getattr(sptune.tuning.tuner, "trial_data", None))
    if mode == "before":
        old_shipping()
    bc.start_ray(num_cpus=2)
    try:
        with bc.temp_dir(f"memory-{mode}") as storage:
            return [run_tuner(data, n, storage) for n in concurrency]
    finally:
        bc.stop_ray()
        sptune.tasks.base.TaskSplits.without_test = saved[0]
        if saved[1] is not None:
            sptune.tuning.tuner.trial_data = saved[1]


# ------------------------------------------------------------------ summary


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per-actor means and the cost of each trial beyond the first (sums over actors, node PSS)."""
    rows = []
    for run in runs:
        actors = run.get("actors", [])
        rows.append(
            {
                "n": run["n"],
                "actors": len(actors),
                "errors": run.get("errors"),
                **{
                    f"mean_{k}_mb": statistics.fmean(a[k] for a in actors) if actors else None
                    for k in ("uss", "pss", "rss", "store_rss")
                },
                "sum_uss_mb": sum(a["uss"] for a in actors),
                "sum_pss_mb": sum(a["pss"] for a in actors),
                "node_pss_mb": run.get("node_pss_mb"),
                "fit_s": run.get("fit_s"),
            }
        )
    first, last = rows[0], rows[-1]
    extra = max(1, last["n"] - first["n"])
    per_extra = {k: (last[k] - first[k]) / extra for k in ("sum_uss_mb", "sum_pss_mb", "node_pss_mb")}
    return {"rows": rows, "per_extra_trial_mb": per_extra}


def report(results: dict[str, Any]) -> None:
    for task, res in results["tasks"].items():
        print(f"\n{task}: dataset shipped to trials {res['dataset_mb']:.1f} MiB ({res['source']})")
        rows = []
        for mode in ("before", "after"):
            for r in res.get(mode, {}).get("rows", []):
                rows.append(
                    [
                        mode,
                        r["n"],
                        r["mean_uss_mb"],
                        r["mean_pss_mb"],
                        r["mean_store_rss_mb"],
                        r["sum_pss_mb"],
                        r["node_pss_mb"],
                    ]
                )
        bc.print_table(["mode", "trials", "USS/actor", "PSS/actor", "store/actor", "sum PSS", "node PSS"], rows)
    print("\nper extra concurrent trial (MiB):")
    rows = []
    for task, res in results["tasks"].items():
        for mode in ("before", "after"):
            if mode in res:
                e = res[mode]["per_extra_trial_mb"]
                rows.append([f"{task} {mode}", res["dataset_mb"], e["sum_uss_mb"], e["sum_pss_mb"], e["node_pss_mb"]])
    bc.print_table(["task / mode", "dataset", "USS", "PSS (actors)", "PSS (node)"], rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", nargs="+", default=["listops", "image"], choices=["listops", "image"])
    ap.add_argument("--modes", nargs="+", default=["before", "after"], choices=["before", "after"])
    ap.add_argument("--concurrency", nargs="+", type=int, default=[1, 2, 4])
    ap.add_argument("--listops-train", type=int, default=LISTOPS_GEN["gen_n_train"])
    ap.add_argument("--data-dir", default=None, help="holds cifar10_gray.npz (else SPTUNE_DATA_DIR)")
    ap.add_argument("--synthetic", action="store_true", help="Image: a random 45k x 1024 uint8 array")
    ap.add_argument("--json", type=Path, default=bc.REPO / "benchmarks" / "results" / "memory.json")
    args = ap.parse_args()
    bc.quiet_env()
    results: dict[str, Any] = {"machine": bc.machine(), "args": vars(args), "tasks": {}}
    for task in args.tasks:
        start = time.perf_counter()
        data = listops_data(args.listops_train) if task == "listops" else image_data(args.data_dir, args.synthetic)
        res = results["tasks"][task] = {
            "dataset_mb": dataset_bytes(data) / MB,
            "source": data.source,
            "train_shape": list(data.train.x.shape),
            "dtype": str(data.train.x.dtype),
            "array_type": type(data.train.x).__name__,
            "load_s": time.perf_counter() - start,
        }
        for mode in args.modes:
            runs = run_mode(data, mode, args.concurrency)
            res[mode] = {"runs": runs, **summarise(runs)}
        del data
    report(results)
    bc.write_json(args.json, results)


if __name__ == "__main__":
    main()
