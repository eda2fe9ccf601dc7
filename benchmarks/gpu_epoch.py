"""CIFAR-LRA (32x32, d64 x 3, 45k train) epoch time per attention kernel and trials per GPU.

Both stages run sptune's own loops (`PretrainLoop`, `FinetuneLoop.train_epoch`), built with the
OptimConfig a trial would get (`sptune.training.model_configs.optim_config`), so the spec's ``training``
settings apply exactly as in a sweep. Each arm forces ``model.attention_kernel`` (sdpa: PyTorch's
scaled_dot_product_attention, which picks its own backend; flash: the flash-attn 2 package), and
runs as N separate processes at once on the one device, as N fractional-GPU trials would
(``resources.gpu: 1/N``): per-trial epoch time, and aggregate rows/s = N x rows / slowest epoch.

  GPU  bf16 autocast (``training.precision: bf16``). Each process: a warm-up epoch on a slice
       (kernel selection, allocator, compilation with training.compile), then all N processes
       start one full epoch together (45k training + 5k validation rows), measured. flash is
       skipped, and said so, where flash-attn is not installed.
  CPU  no GPU numbers: says so and times sdpa only. A full epoch takes far too long here, so a
       warm-up over `--cpu-steps` batches, then the same again timed, EXTRAPOLATED to the epoch
       (steps_per_epoch x s/step + val_rows x s/row). The JSON says ``"extrapolated": true``.

    python benchmarks/gpu_epoch.py --data-dir /work/shared/data --json benchmarks/results/gpu_epoch.json
    python benchmarks/gpu_epoch.py --synthetic --json gpu_epoch.json    # a GPU box without the data
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import queue
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import bench_common as bc
import numpy as np
import torch

STAGES = ("spt", "finetune")


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
    from sptune.training.loops import FinetuneLoop, PretrainLoop, PretrainObjective
    from sptune.training.model_configs import classifier_config, encoder_config, optim_config

    config = {"lr": lr, "batch_size": batch, "seed": spec.seed}
    if stage == "spt":
        p = spec.pretrain
        optim = optim_config(config, spec, spec.pretrain_budget(), p.weight_decay, p.warmup_steps)
        return PretrainLoop(
            encoder_config(spec.model, info),
            PretrainObjective(p.objective, p.mask_ratio, p.loss),
            info,
            train,
            val,
            optim,
        )
    optim = optim_config(config, spec, spec.finetune_budget(), spec.finetune.weight_decay)
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


def gpu_epoch(stage: str, spec: Any, data: Any, args: argparse.Namespace, barrier: Any) -> dict[str, Any]:
    warm_train, warm_val = head(data.train, 50 * args.batch), head(data.val, 512)
    timed_epoch(make_loop(stage, spec, data.info, warm_train, warm_val, args.lr, args.batch))
    loop = make_loop(stage, spec, data.info, data.train, data.val, args.lr, args.batch)
    barrier.wait()  # every trial on the GPU starts its measured epoch at once
    train_s, val_s = timed_epoch(loop)
    return {
        "extrapolated": False,
        "train_s": train_s,
        "val_s": val_s,
        "epoch_s": train_s + val_s,
        "steps": math.ceil(len(data.train) / args.batch),
    }


def cpu_epoch(stage: str, spec: Any, data: Any, args: argparse.Namespace, barrier: Any) -> dict[str, Any]:
    k, v = args.cpu_steps, args.cpu_val_rows
    loop = make_loop(stage, spec, data.info, head(data.train, k * args.batch), head(data.val, v), args.lr, args.batch)
    timed_epoch(loop)  # warm-up (and compilation when training.compile is on)
    barrier.wait()
    train_s, val_s = timed_epoch(loop)
    steps = math.ceil(len(data.train) / args.batch)
    step_s, row_s = train_s / k, val_s / v
    est_train, est_val = steps * step_s, len(data.val) * row_s
    return {
        "extrapolated": True,
        "timed_steps": k,
        "timed_val_rows": v,
        "step_s": step_s,
        "val_row_s": row_s,
        "steps": steps,
        "train_s": est_train,
        "val_s": est_val,
        "epoch_s": est_train + est_val,
    }


def arm_spec(args: argparse.Namespace, kernel: str, cuda: bool) -> Any:
    """The spec one arm trains with: the given one, its attention kernel forced, bf16 on a GPU."""
    from sptune.spec import load_spec

    extra = [f"model.attention_kernel={kernel}"] + ([f"training.precision={args.precision}"] if cuda else [])
    return load_spec(args.spec, [*args.overrides, *extra])


def trial_process(args: argparse.Namespace, kernel: str, rank: int, barrier: Any, out: Any) -> None:
    """One trial's process: times every stage's epoch, in step with the other trials (barrier)."""
    try:
        from sptune.training.device import pick_device

        torch.set_num_threads(args.threads)
        cuda = pick_device(args.device).type == "cuda"
        spec = arm_spec(args, kernel, cuda)
        data = load_cifar(spec, args.data_dir, args.synthetic)
        measure = gpu_epoch if cuda else cpu_epoch
        for stage in args.stages:
            out.put((rank, stage, measure(stage, spec, data, args, barrier)))
    except BaseException:  # the parent reports it; a silent worker would leave the others waiting
        barrier.abort()
        out.put((rank, "error", traceback.format_exc()))


def run_arm(args: argparse.Namespace, kernel: str, trials: int) -> dict[str, Any]:
    """N trial processes at once (spawned: CUDA cannot be forked); per-stage per-trial results."""
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(trials, timeout=args.timeout), ctx.Queue()
    procs = [ctx.Process(target=trial_process, args=(args, kernel, r, barrier, out)) for r in range(trials)]
    for p in procs:
        p.start()
    got: dict[str, list[dict[str, Any]]] = {stage: [] for stage in args.stages}
    try:
        for _ in range(trials * len(args.stages)):
            try:
                rank, stage, result = out.get(timeout=args.timeout)
            except queue.Empty:
                raise RuntimeError(f"{kernel} x {trials}: no epoch within --timeout {args.timeout} s") from None
            if stage == "error":
                raise RuntimeError(f"trial {rank} of {kernel} x {trials} failed:\n{result}")
            got[stage].append({"trial": rank, **result})
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    return {stage: summarise(sorted(rows, key=lambda r: r["trial"])) for stage, rows in got.items()}


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    epochs = [r["epoch_s"] for r in rows]
    # The trials start together, so the slowest one's epoch is the group's wall time.
    return {
        "per_trial": rows,
        "epoch_s_mean": sum(epochs) / len(epochs),
        "epoch_s_max": max(epochs),
        "extrapolated": rows[0]["extrapolated"],
    }


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default=str(bc.SPECS / "cifar_lr.yaml"))
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="e.g. training.compile=true")
    ap.add_argument("--data-dir")
    ap.add_argument("--synthetic", action="store_true", help="random pixels of CIFAR's shape (no data needed)")
    ap.add_argument("--batch", type=int, default=32, help="the spec's pretraining batch (and a finetune choice)")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--kernels", default="sdpa,flash", help="attention kernels to compare (GPU; CPU: sdpa)")
    ap.add_argument("--trials", help="concurrent trials per device to compare (default GPU 1,4; CPU 1)")
    ap.add_argument("--stages", default=",".join(STAGES))
    ap.add_argument("--precision", default="bf16", help="training.precision on a GPU")
    ap.add_argument("--threads", type=int, help="CPU threads per trial (default: the spec's resources.cpu)")
    ap.add_argument("--cpu-steps", type=int, default=2)
    ap.add_argument("--cpu-val-rows", type=int, default=64)
    ap.add_argument("--timeout", type=float, default=1800, help="seconds to wait for a trial's epoch")
    ap.add_argument("--json", type=Path)
    return ap.parse_args()


def plan_arms(args: argparse.Namespace, cuda: bool) -> tuple[list[str], dict[str, str]]:
    """The kernels to run here, and those skipped with the reason."""
    from sptune.training.models.attention import flash_attn_available

    kernels, skipped = [], {}
    for kernel in args.kernels.split(","):
        if not cuda and kernel != "sdpa":
            skipped[kernel] = "no CUDA device here"
        elif kernel == "flash" and not flash_attn_available():
            skipped[kernel] = "flash-attn is not installed (pip install -e '.[gpu]') or the GPU predates Ampere"
        else:
            kernels.append(kernel)
    return kernels, skipped


def main() -> int:
    args = parse_args()
    from sptune.spec import load_spec
    from sptune.training.device import pick_device

    spec = load_spec(args.spec, args.overrides)
    args.device = spec.training.device
    cuda = pick_device(args.device).type == "cuda"
    args.threads = args.threads or max(1, int(spec.resources.cpu))
    args.stages = args.stages.split(",")
    trial_counts = [int(n) for n in (args.trials or ("1,4" if cuda else "1")).split(",")]
    kernels, skipped = plan_arms(args, cuda)
    data = load_cifar(spec, args.data_dir, args.synthetic)  # here only for the shapes and the source
    arms: dict[str, dict[str, Any]] = {}
    for kernel in kernels:
        for n in trial_counts:
            print(f"{kernel}, {n} trial(s) at once on {'cuda' if cuda else 'cpu'} ...", flush=True)
            arms.setdefault(kernel, {})[str(n)] = run_arm(args, kernel, n)
    rows = len(data.train) + len(data.val)
    table = [
        (
            kernel,
            int(n),
            stage,
            s["epoch_s_mean"],
            s["epoch_s_max"],
            int(n) * rows / s["epoch_s_max"],
            s["extrapolated"],
        )
        for kernel, by_n in arms.items()
        for n, by_stage in by_n.items()
        for stage, s in by_stage.items()
    ]
    bc.print_table(["kernel", "trials", "stage", "s/epoch mean", "s/epoch max", "rows/s all", "extrapolated"], table)
    for kernel, why in skipped.items():
        print(f"{kernel}: not measured ({why}).")
    if not cuda:
        print(
            f"GPU numbers not available: no CUDA device here. CPU: {args.cpu_steps} training steps and "
            f"{args.cpu_val_rows} validation rows timed per stage, extrapolated to {len(data.train)} / "
            f"{len(data.val)} rows ({args.threads} thread(s) per trial)."
        )
    out = {
        "machine": bc.machine(),
        "device": "cuda" if cuda else "cpu",
        "gpu_numbers": cuda,
        "cpu_threads_per_trial": args.threads,
        "data_source": data.source,
        "train_rows": len(data.train),
        "val_rows": len(data.val),
        "seq_len": data.info.seq_len,
        "model": spec.model.model_dump(),
        "batch": args.batch,
        "precision": args.precision if cuda else spec.training.precision,
        "compile": spec.training.compile,
        "extrapolated": not cuda,
        "skipped": skipped,
        "arms": arms,
    }
    bc.write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
