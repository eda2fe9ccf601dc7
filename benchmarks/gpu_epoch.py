"""CIFAR-LRA (32x32, d64 x 3, 45k train) epoch time per attention kernel, trials per GPU, packs and capture.

Both stages run sptune's own loops (`PretrainLoop`, `FinetuneLoop.train_epoch`), built with the
OptimConfig a trial would get (`sptune.training.model_configs.optim_config`), so the spec's ``training``
settings apply exactly as in a sweep. Each arm forces ``model.attention_kernel`` (sdpa: PyTorch's
scaled_dot_product_attention, which picks its own backend; flash: the flash-attn 2 package), and
runs as N separate processes at once on the one device, as N fractional-GPU trials would
(``resources.gpu: 1/N``, which the arm's spec sets): per-trial epoch time, aggregate rows/s = N x rows /
slowest epoch, its ratio to one trial alone, and the GPU-busy fraction (nvidia-smi's utilisation, sampled
while the measured epochs run). SPT and finetuning batch sizes are set separately.

Beside the N processes, two more ways to fill a GPU:
  packs    ``--packs 1,8,16``: K members (the same stage's trials, lr and seed differing) trained as one fused
           model in one process, by the pack trainer ``sptune.training.packing.train_pack_steps(members,
           n_steps)`` (imported when a pack arm runs; without it the arm is skipped, saying so).
  capture  ``--capture off,on``: "on" runs each arm again with ``training.compile: cuda_graphs`` (the whole step
           as one CUDA graph, sptune.training.step_graph); a GPU only (on a CPU it is skipped, saying why).
Every arm prints per member-step milliseconds (the arm's training wall time per step, over its members: what one
trial's step costs when the GPU is filled this way), aggregate rows/s, its ratio to one trial alone, and the
GPU-busy fraction.

  GPU  bf16 autocast (``training.precision: bf16``). Each process: a warm-up epoch on a slice
       (kernel selection, allocator, compilation with training.compile), then all N processes
       start one full epoch together (45k training + 5k validation rows), measured. flash is
       skipped, and said so, where flash-attn is not installed.
  CPU  no GPU numbers: says so and times sdpa only. A full epoch takes far too long here, so a
       warm-up over `--cpu-steps` batches, then the same again timed, EXTRAPOLATED to the epoch
       (steps_per_epoch x s/step + val_rows x s/row). The JSON says ``"extrapolated": true``.

    python benchmarks/gpu_epoch.py --data-dir /work/shared/data --json benchmarks/results/gpu_epoch.json
    python benchmarks/gpu_epoch.py --synthetic --json gpu_epoch.json    # a GPU box without the data
    python benchmarks/gpu_epoch.py --synthetic --trials 1,8 --pretrain-batch 256 --finetune-batch 64
"""

from __future__ import annotations

import argparse
import importlib
import math
import multiprocessing as mp
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, NamedTuple

import bench_common as bc
import numpy as np
import torch

STAGES = ("spt", "finetune")


def load_cifar(spec: Any, data_dir: str | None, synthetic: bool) -> Any:
    """The spec's split (45k/5k by default); random pixels of that shape only when asked (a GPU box without data)."""
    if not synthetic:
        return bc.load_data(spec, data_dir)
    from sptune.tasks.base import ArraySplit, TaskInfo, TaskSplits

    rng, side = np.random.default_rng(0), int(spec.task.options.get("resolution", 32))
    n_val = int(spec.task.options.get("n_val", 5000))
    n_train = min(50_000 - n_val, int(spec.task.options.get("max_train") or 50_000))  # as the task reads them

    def split(n: int) -> ArraySplit:
        return ArraySplit(rng.integers(0, 256, (n, side * side), dtype=np.uint8), rng.integers(0, 10, n))

    info = TaskInfo("image", "continuous", side * side, 10, levels=256)
    return TaskSplits(info, split(n_train), split(n_val), lambda: split(0), source="synthetic")


def make_loop(
    stage: str, spec: Any, info: Any, train: Any, val: Any, lr: float, batch: int, seed: int | None = None
) -> Any:
    from sptune.training.loops import FinetuneLoop, PretrainLoop, PretrainObjective
    from sptune.training.model_configs import classifier_config, encoder_config, optim_config

    config = {"lr": lr, "batch_size": batch, "seed": spec.seed if seed is None else seed}
    if stage == "spt":
        p = spec.pretrain
        optim = optim_config(config, spec, spec.pretrain_budget(), p.weight_decay, p.warmup_steps, p.schedule)
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


def stage_batch(args: argparse.Namespace, stage: str) -> int:
    return args.pretrain_batch if stage == "spt" else args.finetune_batch


def gpu_epoch(stage: str, spec: Any, data: Any, args: argparse.Namespace, barrier: Any) -> dict[str, Any]:
    batch = stage_batch(args, stage)
    warm_train, warm_val = head(data.train, 50 * batch), head(data.val, 512)
    timed_epoch(make_loop(stage, spec, data.info, warm_train, warm_val, args.lr, batch))
    loop = make_loop(stage, spec, data.info, data.train, data.val, args.lr, batch)
    barrier.wait()  # every trial on the GPU starts its measured epoch at once
    started = time.time()  # wall clock: the parent's GPU-busy samples are matched to this window
    train_s, val_s = timed_epoch(loop)
    return {
        "extrapolated": False,
        "batch": batch,
        "train_s": train_s,
        "val_s": val_s,
        "epoch_s": train_s + val_s,
        "steps": math.ceil(len(data.train) / batch),
        "window": [started, time.time()],
    }


def cpu_epoch(stage: str, spec: Any, data: Any, args: argparse.Namespace, barrier: Any) -> dict[str, Any]:
    k, v, batch = args.cpu_steps, args.cpu_val_rows, stage_batch(args, stage)
    loop = make_loop(stage, spec, data.info, head(data.train, k * batch), head(data.val, v), args.lr, batch)
    timed_epoch(loop)  # warm-up (and compilation when training.compile is on)
    barrier.wait()
    train_s, val_s = timed_epoch(loop)
    steps = math.ceil(len(data.train) / batch)
    step_s, row_s = train_s / k, val_s / v
    est_train, est_val = steps * step_s, len(data.val) * row_s
    return {
        "extrapolated": True,
        "batch": batch,
        "timed_steps": k,
        "timed_val_rows": v,
        "step_s": step_s,
        "val_row_s": row_s,
        "steps": steps,
        "train_s": est_train,
        "val_s": est_val,
        "epoch_s": est_train + est_val,
    }


# The pack trainer: imported by name only where a pack arm runs, so that this script
# runs, and its other arms measure, on a checkout without it.
# Its package, or the package's module that defines it.
PACK_MODULE, PACK_FUNCTION = "sptune.training.packing", "train_pack_steps"
PACK_DEFINED_IN = PACK_MODULE + ".pack"


def pack_trainer() -> Any:
    """``train_pack_steps(members, n_steps) -> list[dict]``: already-built solo loops trained as one pack."""
    package = importlib.import_module(PACK_MODULE)
    if hasattr(package, PACK_FUNCTION):
        return getattr(package, PACK_FUNCTION)
    return getattr(importlib.import_module(PACK_DEFINED_IN), PACK_FUNCTION)


def pack_capture_unavailable() -> str | None:
    """Why a pack's whole step cannot be captured (None: it can). The pack trainer says it captures its step
    when its members ask for training.compile: cuda_graphs with a true ``CAPTURES_WHOLE_STEP`` in its module;
    without it (an older checkout) a "+capture" pack arm would time an eager pack with capturable optimizers,
    so it is skipped."""
    try:
        captures = getattr(importlib.import_module(PACK_DEFINED_IN), "CAPTURES_WHOLE_STEP", False)
    except ImportError:
        captures = False
    return None if captures else f"the pack trainer does not capture its step ({PACK_DEFINED_IN}.CAPTURES_WHOLE_STEP)"


def pack_unavailable() -> str | None:
    """Why pack arms cannot run here (None: they can)."""
    try:
        pack_trainer()
    except (ImportError, AttributeError) as err:
        return f"pack trainer not available: {PACK_MODULE}.{PACK_FUNCTION} does not import ({err})"
    return None


def pack_members(stage: str, spec: Any, data: Any, args: argparse.Namespace, k: int, train: Any, val: Any) -> list:
    """K members of one stage, as a search would propose them: the same settings, lr and seed differing."""
    batch = stage_batch(args, stage)
    return [make_loop(stage, spec, data.info, train, val, args.lr * (1 + 0.25 * j), batch, spec.seed + j)
            for j in range(k)]


def timed_pack(members: list, n_steps: int) -> tuple[float, float]:
    """(training seconds, validation seconds) of `n_steps` pack steps of ``members``: the pack trainer's round
    validates every member, so validation is timed on its own again and taken off the round's time."""
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    results = pack_trainer()(members, n_steps)
    if cuda:
        torch.cuda.synchronize()
    total = time.perf_counter() - start
    if any(r.get("status") == "diverged" for r in results):
        raise RuntimeError(f"a pack member diverged: {results}")
    start = time.perf_counter()
    for member in members:
        member.validate()
    val_s = time.perf_counter() - start
    return max(total - val_s, 0.0), val_s


def gpu_pack_epoch(stage: str, spec: Any, data: Any, args: argparse.Namespace, k: int) -> dict[str, Any]:
    batch = stage_batch(args, stage)
    warm = pack_members(stage, spec, data, args, k, head(data.train, 50 * batch), head(data.val, 512))
    timed_pack(warm, 50)
    del warm
    members = pack_members(stage, spec, data, args, k, data.train, data.val)
    steps = math.ceil(len(data.train) / batch)
    started = time.time()
    train_s, val_s = timed_pack(members, steps)
    return {"extrapolated": False, "batch": batch, "members": k, "train_s": train_s, "val_s": val_s,
            "epoch_s": train_s + val_s, "steps": steps, "window": [started, time.time()]}


def cpu_pack_epoch(stage: str, spec: Any, data: Any, args: argparse.Namespace, k: int) -> dict[str, Any]:
    n, v, batch = args.cpu_steps, args.cpu_val_rows, stage_batch(args, stage)
    timed_pack(pack_members(stage, spec, data, args, k, head(data.train, n * batch), head(data.val, v)), n)  # warm-up
    members = pack_members(stage, spec, data, args, k, head(data.train, n * batch), head(data.val, v))
    train_s, val_s = timed_pack(members, n)
    steps = math.ceil(len(data.train) / batch)
    step_s, row_s = train_s / n, val_s / v
    est_train, est_val = steps * step_s, len(data.val) * row_s
    return {"extrapolated": True, "batch": batch, "members": k, "timed_steps": n, "timed_val_rows": v,
            "step_s": step_s, "val_row_s": row_s, "steps": steps, "train_s": est_train, "val_s": est_val,
            "epoch_s": est_train + est_val}


# Each process builds one trial's loops, and a pack arm packs such loops itself: the spec's own packing
# (resources.pack) is not what an arm runs.
SOLO = ["resources.pack=1"]


def arm_spec(args: argparse.Namespace, kernel: str, cuda: bool, trials: int = 1, capture: bool = False) -> Any:
    """The spec one arm trains with: the given one, its attention kernel forced; on a GPU bf16 and each trial's
    share of it (a trial that reserved no GPU trains on the CPU, sptune.training.device.trial_device); with
    ``capture`` the whole step as one CUDA graph."""
    from sptune.spec import load_spec

    gpu = [f"training.precision={args.precision}", f"resources.gpu={1 / trials}"] if cuda else []
    graphs = ["training.compile=cuda_graphs"] if capture else []
    return load_spec(args.spec, [*SOLO, *args.overrides, f"model.attention_kernel={kernel}", *gpu, *graphs])


def trial_process(
    args: argparse.Namespace, arm: Arm, rank: int, barrier: Any, out: Any
) -> None:
    """One trial's process (or a pack's one process): times every stage's epoch, in step with the other trials
    (barrier)."""
    try:
        from sptune.training.device import pick_device

        torch.set_num_threads(args.threads)
        cuda = pick_device(args.device).type == "cuda"
        spec = arm_spec(args, arm.kernel, cuda, arm.processes, arm.capture)
        data = load_cifar(spec, args.data_dir, args.synthetic)
        for stage in args.stages:
            if arm.pack:
                barrier.wait()
                result = (gpu_pack_epoch if cuda else cpu_pack_epoch)(stage, spec, data, args, arm.members)
            else:
                result = (gpu_epoch if cuda else cpu_epoch)(stage, spec, data, args, barrier)
            out.put((rank, stage, result))
    except BaseException:  # the parent reports it; a silent worker would leave the others waiting
        barrier.abort()
        out.put((rank, "error", traceback.format_exc()))


class Arm(NamedTuple):
    """One way of filling the device: ``members`` trials as that many processes, or as one pack."""

    kernel: str
    members: int
    pack: bool = False
    capture: bool = False

    @property
    def processes(self) -> int:
        return 1 if self.pack else self.members

    @property
    def label(self) -> str:
        """Its key under the kernel in the JSON: "8" (8 processes, as before), "pack8", and "+capture"."""
        return ("pack" if self.pack else "") + str(self.members) + ("+capture" if self.capture else "")


def run_arm(args: argparse.Namespace, arm: Arm) -> dict[str, Any]:
    """The arm's processes at once (spawned: CUDA cannot be forked); per-stage per-trial results."""
    ctx = mp.get_context("spawn")
    trials, kernel = arm.processes, f"{arm.kernel} arm {arm.label}"
    barrier, out = ctx.Barrier(trials, timeout=args.timeout), ctx.Queue()
    procs = [ctx.Process(target=trial_process, args=(args, arm, r, barrier, out)) for r in range(trials)]
    busy = BusySampler() if args.cuda else None
    for p in procs:
        p.start()
    got: dict[str, list[dict[str, Any]]] = {stage: [] for stage in args.stages}
    try:
        for _ in range(trials * len(args.stages)):
            try:
                rank, stage, result = out.get(timeout=args.timeout)
            except queue.Empty:
                raise RuntimeError(f"{kernel}: no epoch within --timeout {args.timeout} s") from None
            if stage == "error":
                raise RuntimeError(f"trial {rank} of {kernel} failed:\n{result}")
            got[stage].append({"trial": rank, **result})
    finally:
        samples = busy.stop() if busy else []
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    return {stage: summarise(sorted(rows, key=lambda r: r["trial"]), samples, arm)
            for stage, rows in got.items()}


class BusySampler:
    """nvidia-smi's GPU utilisation (the share of time a kernel ran), sampled every 100 ms in a thread."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float]] = []
        smi = shutil.which("nvidia-smi")
        # The GPU the trials share: the first one CUDA shows them (nvidia-smi counts physical GPUs).
        first = (os.environ.get("CUDA_VISIBLE_DEVICES") or "0").split(",")[0].strip() or "0"
        cmd = [smi or "nvidia-smi", "-i", first, "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
               "-lms", "100"]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) if smi else None
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        if self.proc is None:
            return
        for line in self.proc.stdout:
            value = line.strip()
            if value.isdigit():
                self.samples.append((time.time(), int(value) / 100))

    def stop(self) -> list[tuple[float, float]]:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
        self.thread.join(timeout=10)
        return self.samples


def busy_fraction(samples: list[tuple[float, float]], rows: list[dict[str, Any]]) -> float | None:
    """Mean utilisation over the measured epochs' window (first start to last end); None without samples."""
    windows = [r["window"] for r in rows if "window" in r]
    if not windows:
        return None
    start, end = min(w[0] for w in windows), max(w[1] for w in windows)
    inside = [busy for t, busy in samples if start <= t <= end]
    return sum(inside) / len(inside) if inside else None


def summarise(
    rows: list[dict[str, Any]], samples: list[tuple[float, float]] | None = None, arm: Arm | None = None
) -> dict[str, Any]:
    epochs = [r["epoch_s"] for r in rows]
    members = arm.members if arm else len(rows)
    # The trials start together, so the slowest one's epoch is the group's wall time; in that time every
    # member took `steps` steps: the wall time of one member-step is the slowest training time over them all.
    slowest_train = max(r["train_s"] for r in rows)
    return {
        "per_trial": rows,
        "layout": "pack" if arm and arm.pack else "processes",
        "members": members,
        "capture": bool(arm and arm.capture),
        "epoch_s_mean": sum(epochs) / len(epochs),
        "epoch_s_max": max(epochs),
        "ms_per_member_step": 1000 * slowest_train / rows[0]["steps"] / members,
        "extrapolated": rows[0]["extrapolated"],
        "gpu_busy": busy_fraction(samples or [], rows),
    }


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default=str(bc.SPECS / "cifar_lr.yaml"))
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="e.g. training.compile=true")
    ap.add_argument("--data-dir")
    ap.add_argument("--synthetic", action="store_true", help="random pixels of CIFAR's shape (no data needed)")
    ap.add_argument("--batch", type=int, default=32, help="both stages' batch size, unless given per stage")
    ap.add_argument("--pretrain-batch", type=int, help="SPT's batch size (default --batch)")
    ap.add_argument("--finetune-batch", type=int, help="finetuning's batch size (default --batch)")
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--kernels", default="sdpa,flash", help="attention kernels to compare (GPU; CPU: sdpa)")
    ap.add_argument("--trials", help="concurrent trials per device to compare (default GPU 1,8; CPU 1; 0: none)")
    ap.add_argument("--packs", default="", help="pack sizes to compare, e.g. 1,8,16 (one process trains K members)")
    ap.add_argument("--capture", default="off", help="off, on or off,on: training.compile=cuda_graphs (GPU only)")
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


def _counts(text: str) -> list[int]:
    return [int(n) for n in text.split(",") if n.strip() and int(n) > 0]


def plan_layouts(
    args: argparse.Namespace, kernels: list[str], cuda: bool, pack_reason: str | None, pack_capture: str | None
) -> tuple[list[Arm], dict[str, str]]:
    """Every arm to run, processes first, then packs, each without capture and then with it; and those skipped
    (by label), with the reason (``pack_reason``: why no pack runs; ``pack_capture``: why no pack is captured)."""
    captures = [c == "on" for c in args.capture.split(",")]
    arms, skipped = [], {}
    for kernel in kernels:
        for capture in captures:
            for pack, counts in ((False, args.trial_counts), (True, _counts(args.packs))):
                for n in counts:
                    arm = Arm(kernel, n, pack, capture)
                    if capture and not cuda:
                        skipped[arm.label] = "whole-step capture needs CUDA (on a CPU cuda_graphs compiles instead)"
                    elif pack and pack_reason:
                        skipped[arm.label] = pack_reason
                    elif pack and capture and pack_capture:
                        skipped[arm.label] = pack_capture
                    else:
                        arms.append(arm)
    return arms, skipped


def throughput_table(arms: dict[str, dict[str, Any]], rows: int) -> list[tuple]:
    """Per kernel, arm and stage: per member-step ms, epoch times, aggregate rows/s (also written into the arm),
    its ratio to the same kernel with one trial (one process, no capture), and the GPU-busy fraction."""
    table = []
    for kernel, by_arm in arms.items():
        for label, by_stage in by_arm.items():
            for stage, s in by_stage.items():
                s["rows_per_s"] = s["members"] * rows / s["epoch_s_max"]
                alone = by_arm.get("1", {}).get(stage)
                s["vs_one_trial"] = s["rows_per_s"] / (rows / alone["epoch_s_max"]) if alone else None
                busy = "n/a" if s["gpu_busy"] is None else f"{s['gpu_busy']:.0%}"
                ratio = "n/a" if s["vs_one_trial"] is None else f"{s['vs_one_trial']:.2f}x"
                batch = s["per_trial"][0]["batch"]
                table.append((kernel, label, s["members"], "on" if s["capture"] else "off", stage, batch,
                              s["ms_per_member_step"], s["epoch_s_mean"], s["epoch_s_max"], s["rows_per_s"], ratio,
                              busy, s["extrapolated"]))
    return table


def cpu_fallback(device: str, cuda_available: bool) -> list[str]:
    """The overrides that time a spec asking for CUDA on a machine without it on the CPU (extrapolated, as every
    CPU arm is), rather than fail in the first CUDA call: call B's spec, say, read by the kit's arms."""
    return ["training.device=cpu", "training.precision=auto"] if device == "cuda" and not cuda_available else []


def main() -> int:
    args = parse_args()
    from sptune.spec import load_spec
    from sptune.training.device import pick_device

    spec = load_spec(args.spec, [*SOLO, *args.overrides])
    if fallback := cpu_fallback(spec.training.device, torch.cuda.is_available()):
        print("The spec asks for training.device: cuda and there is no CUDA device here: timing on the CPU "
              f"({', '.join(fallback)}).", flush=True)
        args.overrides = [*args.overrides, *fallback]  # the arms' processes read them too
        spec = load_spec(args.spec, [*SOLO, *args.overrides])
    args.device = spec.training.device
    cuda = args.cuda = pick_device(args.device).type == "cuda"
    args.threads = args.threads or max(1, int(spec.resources.cpu))
    args.stages = args.stages.split(",")
    args.pretrain_batch = args.pretrain_batch or args.batch
    args.finetune_batch = args.finetune_batch or args.batch
    args.trial_counts = _counts(args.trials or ("1,8" if cuda else "1"))
    kernels, skipped = plan_arms(args, cuda)
    packs = bool(_counts(args.packs))
    layouts, skipped_arms = plan_layouts(args, kernels, cuda, pack_unavailable() if packs else None,
                                         pack_capture_unavailable() if packs else None)
    data = load_cifar(spec, args.data_dir, args.synthetic)  # here only for the shapes and the source
    arms: dict[str, dict[str, Any]] = {}
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
        "batch": {"spt": args.pretrain_batch, "finetune": args.finetune_batch},
        "precision": args.precision if cuda else spec.training.precision,
        "compile": spec.training.compile,
        "extrapolated": not cuda,
        "skipped": skipped,
        "skipped_arms": skipped_arms,
        "arms": arms,
        # True once every planned arm ran: a run cut short by its timeout keeps the arms it finished.
        "complete": False,
    }
    for arm in layouts:
        how = f"a pack of {arm.members}" if arm.pack else f"{arm.members} trial(s) at once"
        print(f"{arm.kernel}, {how}{', whole step captured' if arm.capture else ''} on {'cuda' if cuda else 'cpu'} ...",
              flush=True)
        arms.setdefault(arm.kernel, {})[arm.label] = run_arm(args, arm)
        bc.write_json(args.json, out)  # after every arm: what a call's timeout cuts keeps the arms before it
    rows = len(data.train) + len(data.val)
    table = throughput_table(arms, rows)
    if table:
        bc.print_table(["kernel", "arm", "members", "capture", "stage", "batch", "ms/member-step", "s/epoch mean",
                        "s/epoch max", "rows/s all", "vs 1 trial", "GPU busy", "extrapolated"], table)
    else:
        print("No arm ran here (each one skipped says why below).")
    for kernel, why in skipped.items():
        print(f"{kernel}: not measured ({why}).")
    for label, why in skipped_arms.items():
        print(f"arm {label}: not measured ({why}).")
    if not cuda:
        print(
            f"GPU numbers not available: no CUDA device here. CPU: {args.cpu_steps} training steps and "
            f"{args.cpu_val_rows} validation rows timed per stage, extrapolated to {len(data.train)} / "
            f"{len(data.val)} rows ({args.threads} thread(s) per trial). ms/member-step is extrapolated too."
        )
    out["complete"] = True
    bc.write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
