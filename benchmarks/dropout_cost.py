"""PyTorch's CPU dropout vs sptune's cheaper mask, side by side in one run.

  ops     forward + backward of one dropout on the shapes sptune's models drop (digits: 32 x 64 x 64 and
          the feed-forward's 32 x 64 x 128; Image: 8 x 1,024 x 64), best of `--reps`, the two arms
          alternated per shape.
  digits  the README main job's training epoch (digits, its spec's model, batch 32, `FinetuneLoop` as a
          trial runs it), one loop per arm in this process, epochs alternated ABBA... over `--epochs`
          rounds; thread CPU seconds per epoch, medians.

1 thread. The "pytorch" arm is sptune's `Dropout` with `nn.Dropout`'s own forward patched back in (`pytorch_dropout`).

    python benchmarks/dropout_cost.py --json benchmarks/results/dropout_cost.json
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import bench_common as bc
import torch
from torch import nn

from sptune.training.models.dropout import Dropout

REPO = Path(__file__).resolve().parent.parent
SHAPES = {"digits attention/residual": (32, 64, 64), "digits feed-forward": (32, 64, 128), "image": (8, 1024, 64)}
ARMS = ("pytorch", "sptune")


@contextmanager
def arm_dropout(arm: str) -> Iterator[None]:
    """sptune's Dropout as it ships ("sptune"), or with PyTorch's own forward ("pytorch")."""
    if arm == "sptune":
        yield
        return
    shipped = Dropout.forward
    Dropout.forward = nn.Dropout.forward
    try:
        yield
    finally:
        Dropout.forward = shipped


def op_ms(shape: tuple[int, ...], reps: int) -> float:
    """Best forward + backward time of one p = 0.1 dropout, in ms."""
    layer = Dropout(0.1).train()
    x = torch.randn(*shape, requires_grad=True)
    grad = torch.randn(*shape)
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        layer(x).backward(grad)
        best = min(best, time.perf_counter() - start)
    return best * 1e3


def ops_section(reps: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, shape in SHAPES.items():
        times: dict[str, float] = {}
        for arm in [*ARMS, *reversed(ARMS)]:  # ABBA: neither arm always first
            with arm_dropout(arm):
                times[arm] = min(times.get(arm, float("inf")), op_ms(shape, reps))
        out[name] = {"shape": list(shape), **{f"{arm}_ms": t for arm, t in times.items()},
                     "ratio": times["sptune"] / times["pytorch"]}
    return out


def digits_loops() -> dict[str, Any]:
    import sptune.training.loops as train
    from sptune.spec import load_spec
    from sptune.tasks import TaskRequest, load_task
    from sptune.training.model_configs import classifier_config

    spec = load_spec(REPO / "search_spaces" / "digits_quick.yaml")
    data = load_task(TaskRequest(spec.task.name, spec.task.options, spec.seed, None))
    cfg = classifier_config(spec.model, data.info)
    optim = train.OptimConfig(lr=3e-3, batch_size=32, epochs=20)
    return {arm: train.FinetuneLoop(cfg, data.info, data.train, data.val, optim) for arm in ARMS}


def digits_section(epochs: int) -> dict[str, Any]:
    loops = digits_loops()
    seconds: dict[str, list[float]] = {arm: [] for arm in ARMS}
    val_acc: dict[str, list[float]] = {arm: [] for arm in ARMS}
    for r in range(epochs):
        for arm in (ARMS if r % 2 == 0 else ARMS[::-1]):
            with arm_dropout(arm):
                start = time.thread_time()
                metrics = loops[arm].train_epoch()
                seconds[arm].append(time.thread_time() - start)
            val_acc[arm].append(metrics["val_acc"])
    medians = {arm: statistics.median(s) for arm, s in seconds.items()}
    return {"cpu_s_per_epoch": medians, "ratio": medians["sptune"] / medians["pytorch"],
            "per_epoch": seconds, "val_acc": val_acc}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--epochs", type=int, default=6, help="digits epochs per arm")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(1)
    start = time.perf_counter()
    out: dict[str, Any] = {"machine": bc.machine(), "ops": ops_section(args.reps)}
    out["digits"] = digits_section(args.epochs)
    rows = [[name, o["pytorch_ms"], o["sptune_ms"], o["ratio"]] for name, o in out["ops"].items()]
    d = out["digits"]
    rows.append(["digits epoch (CPU s)", d["cpu_s_per_epoch"]["pytorch"], d["cpu_s_per_epoch"]["sptune"], d["ratio"]])
    bc.print_table(["what", "pytorch (ms, or s)", "sptune", "ratio"], rows)
    return bc.finish(args.json, out, start)


if __name__ == "__main__":
    sys.exit(main())
