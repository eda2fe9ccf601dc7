"""ATen ops of one pack step, for K = 1, 8, 16 members, on search_spaces/cifar_1layer_gpu.yaml's model.

A kernel launch per op is what sets a small model's pace on a GPU, so a pack pays off only where its op count does
not grow with K. Counted on a CPU (the op sequence is the device's, less the CUDA-only kernels) with a
TorchDispatchMode around one `PackLoop.train_step` after warm-up steps: every ATen op the step dispatches,
and apart the non-view ones (a view launches nothing). Finetuning (the Classifier) and masked pretraining, the
spec's settings (1,024 tokens, d64, 4 heads, rotary, max pooling, dropout 0, no clipping) at a small batch: the
count does not depend on the batch.

    python benchmarks/pack_ops.py --json benchmarks/results/pack_ops.json
    python benchmarks/pack_ops.py --quick          # K = 1 and 2 at 64 tokens (the smoke test's arguments)
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import bench_common as bc
import torch
from throughput import synthetic
from torch.utils._python_dispatch import TorchDispatchMode

SPEC = Path(__file__).resolve().parents[1] / "search_spaces" / "cifar_1layer_gpu.yaml"
TARGET = 1.25  # K = 8's ops at most this many times K = 1's


class OpCounter(TorchDispatchMode):
    """Counts the ATen ops dispatched while active, by name, views apart."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self.views = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if func.is_view:
            self.views += 1
        else:
            self.ops[str(func.overloadpacket.__name__)] += 1
        return func(*args, **(kwargs or {}))


def members(stage: str, k: int, seq_len: int, batch: int) -> list:
    """K loops of one stage as a search proposes them (lr and seed differing), on the spec's model."""
    from sptune.spec import load_spec
    from sptune.training.loops import FinetuneLoop, OptimConfig, PretrainLoop, PretrainObjective
    from sptune.training.model_configs import classifier_config

    spec = load_spec(SPEC)
    info, train = synthetic("continuous", seq_len, batch * 8)
    _, val = synthetic("continuous", seq_len, 2, seed=1)
    cfg = classifier_config(spec.model, info)
    loops = []
    for j in range(k):
        optim = OptimConfig(
            lr=1e-4 * (1 + 0.25 * j), seed=j, batch_size=batch, epochs=2, grad_clip=0.0, weight_decay=0.0, device="cpu"
        )
        if stage == "finetune":
            loops.append(FinetuneLoop(cfg, info, train, val, optim))
        else:
            objective = PretrainObjective(spec.pretrain.objective, spec.pretrain.mask_ratio, spec.pretrain.loss)
            loops.append(PretrainLoop(cfg.encoder, objective, info, train, val, optim))
    return loops


def count_step(stage: str, k: int, seq_len: int, batch: int) -> dict[str, Any]:
    """The ops of one pack step of K members (after warm-up steps that leave nothing lazy)."""
    from sptune.training.packing.pack import PackLoop

    pack = PackLoop(members(stage, k, seq_len, batch))
    pack.train_steps(3)  # warm-up: the noise specs, AdamW's state, the first pass's order
    sums = pack.new_sums()
    counter = OpCounter()
    with counter:
        pack.train_step(pack.active(), sums)
    return {
        "members": k,
        "ops": sum(counter.ops.values()),
        "views": counter.views,
        "by_op": dict(counter.ops.most_common()),
    }


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="K = 1 and 2 at 64 tokens: seconds, for a smoke test")
    ap.add_argument("--json", type=Path)
    return ap.parse_args()


def main() -> int:
    args = parse_args()
    start = time.perf_counter()
    torch.set_num_threads(1)
    sizes, seq_len, batch = ((1, 2), 64, 2) if args.quick else ((1, 8, 16), 1024, 2)
    out: dict[str, Any] = {"spec": str(SPEC.name), "seq_len": seq_len, "batch": batch, "target": TARGET, "stages": {}}
    print(f"{'stage':<10} {'K':>3} {'ops':>6} {'x K=1':>7} {'views':>6}")
    worst = 0.0
    for stage in ("finetune", "pretrain"):
        rows = [count_step(stage, k, seq_len, batch) for k in sizes]
        for row in rows:
            row["ratio_to_k1"] = row["ops"] / rows[0]["ops"]
            print(f"{stage:<10} {row['members']:>3} {row['ops']:>6} {row['ratio_to_k1']:>7.2f} {row['views']:>6}")
        worst = max(worst, max(row["ratio_to_k1"] for row in rows if row["members"] <= 8))
        out["stages"][stage] = rows
    out["worst_ratio_k8"] = worst
    print(f"worst K <= 8 ratio {worst:.2f} (target <= {TARGET})")
    return bc.finish(args.json, out, start)


if __name__ == "__main__":
    sys.exit(main())
