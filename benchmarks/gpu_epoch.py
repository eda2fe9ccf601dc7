"""CIFAR-LRA (32x32, d64 x 3, 45k train) SPT and finetune epoch time on whatever device this machine has.

Both stages run sptune's own loops (`PretrainLoop`, `FinetuneLoop.train_epoch`), built with the
OptimConfig a trial would get (`sptune.trainables._optim_config`), so the spec's
``training.precision`` (auto = bf16 autocast on a GPU, fp32 on CPU) and ``training.compile``
(torch.compile of the forward pass) apply exactly as in a sweep.

  GPU  a warm-up epoch on a slice (absorbs compilation and kernel selection), then one full
       epoch: 45k training rows + the 5k validation rows, measured.
  CPU  a full epoch takes far too long here, so a fraction is timed and EXTRAPOLATED: a warm-up
       epoch over `--cpu-steps` batches, then the same again timed, giving seconds per training
       step and per validation row; the epoch estimate is steps_per_epoch x s/step +
       val_rows x s/row. The JSON says ``"extrapolated": true``.

    python benchmarks/gpu_epoch.py --data-dir /work/shared/data --json benchmarks/results/gpu_epoch.json
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Any

import bench_common as bc
import numpy as np
import torch


def load_cifar(spec: Any, data_dir: str | None, synthetic: bool) -> Any:
    """The real 45k/5k split; random pixels of the same shape only when asked (e.g. a GPU box without data)."""
    if not synthetic:
        return bc.load_data(spec, data_dir)
    from sptune.tasks.base import ArraySplit, TaskInfo, TaskSplits

    rng, side = np.random.default_rng(0), int(spec.task.options.get("resolution", 32))
    n_val = int(spec.task.options.get("n_val", 5000))

    def split(n: int) -> ArraySplit:
        return ArraySplit(rng.integers(0, 256, (n, side * side), dtype=np.uint8), rng.integers(0, 10, n))

    info = TaskInfo("image", "continuous", side * side, 10, levels=256)
    return TaskSplits(info, split(50_000 - n_val), split(n_val), lambda: split(0), source="synthetic")


def make_loop(stage: str, spec: Any, info: Any, train: Any, val: Any, lr: float, batch: int) -> Any:
    from sptune.build import classifier_config, encoder_config
    from sptune.train import FinetuneLoop, PretrainLoop, PretrainObjective
    from sptune.trainables import _optim_config

    config = {"lr": lr, "batch_size": batch, "seed": spec.seed}
    if stage == "spt":
        p = spec.pretrain
        optim = _optim_config(config, spec, p.epochs, p.weight_decay)
        return PretrainLoop(encoder_config(spec.model, info), PretrainObjective(p.objective, p.mask_ratio, p.loss),
                            info, train, val, optim)
    optim = _optim_config(config, spec, spec.finetune.epochs, spec.finetune.weight_decay)
    return FinetuneLoop(classifier_config(spec.model, info), info, train, val, optim)


def head(split: Any, rows: int) -> Any:
    from sptune.tasks.base import ArraySplit

    return ArraySplit(split.x[:rows], split.y[:rows])


def timed_epoch(loop: Any) -> tuple[float, float]:
    """(training seconds, validation seconds) of one `train_epoch` call."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    start = time.perf_counter()
    metrics = loop.train_epoch()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    total = time.perf_counter() - start
    return metrics["epoch_seconds"], total - metrics["epoch_seconds"]


def gpu_epoch(stage: str, spec: Any, data: Any, args: argparse.Namespace) -> dict[str, Any]:
    warm_train, warm_val = head(data.train, 50 * args.batch), head(data.val, 512)
    timed_epoch(make_loop(stage, spec, data.info, warm_train, warm_val, args.lr, args.batch))
    loop = make_loop(stage, spec, data.info, data.train, data.val, args.lr, args.batch)
    train_s, val_s = timed_epoch(loop)
    return {"extrapolated": False, "train_s": train_s, "val_s": val_s, "epoch_s": train_s + val_s,
            "steps": math.ceil(len(data.train) / args.batch)}


def cpu_epoch(stage: str, spec: Any, data: Any, args: argparse.Namespace) -> dict[str, Any]:
    k, v = args.cpu_steps, args.cpu_val_rows
    loop = make_loop(stage, spec, data.info, head(data.train, k * args.batch), head(data.val, v), args.lr, args.batch)
    timed_epoch(loop)  # warm-up (and compilation when training.compile is on)
    train_s, val_s = timed_epoch(loop)
    steps = math.ceil(len(data.train) / args.batch)
    step_s, row_s = train_s / k, val_s / v
    est_train, est_val = steps * step_s, len(data.val) * row_s
    return {"extrapolated": True, "timed_steps": k, "timed_val_rows": v, "step_s": step_s, "val_row_s": row_s,
            "steps": steps, "train_s": est_train, "val_s": est_val, "epoch_s": est_train + est_val}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default=str(bc.SPECS / "cifar_lr.yaml"))
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="e.g. training.compile=true")
    ap.add_argument("--data-dir")
    ap.add_argument("--synthetic", action="store_true", help="random pixels of CIFAR's shape (no data needed)")
    ap.add_argument("--batch", type=int, default=32, help="the spec's pretraining batch (and a finetune choice)")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--threads", type=int, help="CPU threads (default: the spec's resources.cpu, one trial's share)")
    ap.add_argument("--cpu-steps", type=int, default=2)
    ap.add_argument("--cpu-val-rows", type=int, default=64)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    from sptune.device import pick_device
    from sptune.spec import load_spec

    spec = load_spec(args.spec, args.overrides)
    device = pick_device(spec.training.device)
    threads = args.threads or max(1, int(spec.resources.cpu))
    torch.set_num_threads(threads)
    data = load_cifar(spec, args.data_dir, args.synthetic)
    measure = gpu_epoch if device.type == "cuda" else cpu_epoch
    stages = {}
    for stage in ("spt", "finetune"):
        print(f"{stage}: timing on {device.type} ...", flush=True)
        stages[stage] = measure(stage, spec, data, args)
    out = {"machine": bc.machine(), "device": device.type, "cpu_threads": threads, "data_source": data.source,
           "train_rows": len(data.train), "val_rows": len(data.val), "seq_len": data.info.seq_len,
           "model": spec.model.model_dump(), "batch": args.batch, "precision": spec.training.precision,
           "compile": spec.training.compile, "extrapolated": device.type != "cuda", "stages": stages}
    bc.print_table(["stage", "device", "s/epoch", "train s", "val s", "extrapolated"],
                   [(k, device.type, v["epoch_s"], v["train_s"], v["val_s"], v["extrapolated"])
                    for k, v in stages.items()])
    if out["extrapolated"]:
        print(f"CPU: {args.cpu_steps} training steps and {args.cpu_val_rows} validation rows timed per stage, "
              f"extrapolated to {len(data.train)} / {len(data.val)} rows ({threads} thread(s)).")
    bc.write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
