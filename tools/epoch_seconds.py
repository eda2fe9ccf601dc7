"""Seconds per epoch of a spec's pretraining and finetuning, on this machine, with sptune's own loops.

For sizing studies: a study's cost is its trial-epochs (``--dry-run`` prints them) times these. Both
stages run `PretrainLoop` / `FinetuneLoop.train_epoch` (built as a trial builds them, via
``gpu_epoch.make_loop``) on the spec's real data: a warm-up over ``--steps`` batches, then the same
again timed, extrapolated to the full training split plus validation. Two clocks: wall seconds, and
the process's CPU seconds, which on a shared machine is what the epoch would take on a quiet core
(with 1 thread per trial, as the specs here use; say ``--threads`` otherwise).

    python tools/epoch_seconds.py --spec search_spaces/cifar16_1layer.yaml --data-dir /work/shared/data
    python tools/epoch_seconds.py --spec search_spaces/pathfinder32_budget.yaml --set model.n_layers=2
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch

# Data loading and the loop builder are the benchmarks' own, so this times an epoch exactly as they do.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_common as bc  # noqa: E402
from gpu_epoch import head, make_loop  # noqa: E402


def timed(loop: Any) -> tuple[float, float]:
    """(wall s, CPU s) of one `train_epoch` call (training and validation)."""
    wall, cpu = time.perf_counter(), time.process_time()
    loop.train_epoch()
    return time.perf_counter() - wall, time.process_time() - cpu


def stage_seconds(stage: str, spec: Any, data: Any, args: argparse.Namespace) -> dict[str, Any]:
    """One stage's epoch, extrapolated from `--steps` batches and `--val-rows` validation rows."""
    batch = args.batch or _batch(spec, stage)
    k, v = args.steps, min(args.val_rows, len(data.val))
    loop = make_loop(stage, spec, data.info, head(data.train, k * batch), head(data.val, v), 1e-3, batch)
    timed(loop)  # warm-up: allocator, first-call dispatch
    wall, cpu = timed(loop)
    # A validation pass over v rows costs about what v / batch training steps forward-only cost: the
    # extrapolation scales the measured (train + val) time by the full split sizes.
    steps = math.ceil(len(data.train) / batch)
    scale = (steps + len(data.val) / batch / 3) / (k + v / batch / 3)
    return {"batch": batch, "timed_steps": k, "timed_val_rows": v, "steps": steps,
            "wall_s": wall * scale, "cpu_s": cpu * scale}


def _batch(spec: Any, stage: str) -> int:
    search = spec.pretrain.search if stage == "spt" else next(iter(spec.variants.values())).search
    return int(search.batch_size.values[0])


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", required=True)
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    ap.add_argument("--data-dir")
    ap.add_argument("--batch", type=int, help="default: the spec's first batch_size choice")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--val-rows", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--stages", default="spt,finetune")
    ap.add_argument("--json", type=Path)
    return ap.parse_args()


def main() -> int:
    args = parse_args()
    from sptune.spec import load_spec

    torch.set_num_threads(args.threads)
    spec = load_spec(args.spec, args.overrides)
    data = bc.load_data(spec, args.data_dir)
    out = {"spec": args.spec, "overrides": args.overrides, "threads": args.threads,
           "train_rows": len(data.train), "val_rows": len(data.val), "seq_len": data.info.seq_len,
           "load_avg_1min": os.getloadavg()[0], "stages": {}}
    for stage in args.stages.split(","):
        out["stages"][stage] = s = stage_seconds(stage, spec, data, args)
        print(f"{Path(args.spec).stem} {' '.join(args.overrides)} {stage}: {s['wall_s']:.1f} s wall, "
              f"{s['cpu_s']:.1f} s CPU per epoch ({len(data.train)} rows, batch {s['batch']})", flush=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
