"""A study whose two finetune variants both start from SPT: pretraining runs once; its share of the time.

The study is digits_quick with its `scratch` variant replaced by a second SPT-initialised variant
(`spt_b`, kind spt, its own LR range), small budgets and a FIFO scheduler, run through
`sptune.sweep.main` on a Ray instance started here (so Ray's start is not in the study time).
Everything reported comes from the study's own ``results.json`` ``timeline``: seconds of the one
pretraining stage, of each finetune stage, the total, and what the total would be if each variant
ran its own pretraining (``total + (variants - 1) x SPT``).

    python benchmarks/spt_reuse.py --json benchmarks/results/spt_reuse.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import bench_common as bc


def reuse_spec(base: dict[str, Any], epochs: int, pretrain_trials: int, trials: int) -> dict[str, Any]:
    data = dict(base)
    spt = dict(base["variants"]["spt"])
    spt_b = {"kind": "spt", "search": {"lr": {"type": "loguniform", "low": 3.0e-5, "high": 1.0e-3},
                                       "batch_size": {"type": "choice", "values": [32]}}}
    data["variants"] = {name: {**v, "num_samples": trials, "epochs": epochs}
                        for name, v in (("spt", spt), ("spt_b", spt_b))}
    data["pretrain"] = {**base["pretrain"], "epochs": epochs, "num_samples": pretrain_trials}
    data["finetune"] = {**base.get("finetune", {}), "epochs": epochs}
    data["scheduler"] = {"type": "fifo"}
    if trials < 2:  # seed-robust selection re-trains a variant's 2 best configs: one trial has one
        data["selection"] = {"top_k": 1}
    return data


def run_study(spec_path: Path, out: Path, data_dir: str | None) -> dict[str, Any]:
    from sptune.sweep import main

    ray_start = bc.start_ray(2)
    try:
        start = time.perf_counter()
        code = main([str(spec_path), "--output", str(out)] + (["--data-dir", data_dir] if data_dir else []))
        wall = time.perf_counter() - start
    finally:
        bc.stop_ray()
    if code != 0:
        raise SystemExit(f"study failed with exit status {code}")
    return {"ray_start_s": ray_start, "sweep_main_wall_s": wall}


def summarize(results: dict[str, Any], run: dict[str, Any], n_variants: int) -> dict[str, Any]:
    timeline = results["timeline"]
    stages = {t["stage"]: t["end"] - t["start"] for t in timeline}
    pretrain_runs = sum(1 for t in timeline if t["stage"] == "pretrain")
    total = max(t["end"] for t in timeline) - min(t["start"] for t in timeline)
    spt = stages["pretrain"]
    without = total + (n_variants - 1) * spt
    return {"pretrain_stage_runs": pretrain_runs, "stage_seconds": stages, "spt_s": spt, "study_total_s": total,
            "spt_fraction": spt / total, "finetune_variants_from_spt": n_variants,
            "total_without_reuse_s": without, "saving_fraction": 1 - total / without,
            "rows": [{k: r[k] for k in ("variant", "kind", "lr", "batch_size", "val_acc", "test_acc", "trials")}
                     for r in results["rows"]], **run}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default=str(bc.SPECS / "digits_quick.yaml"))
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    ap.add_argument("--data-dir")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--pretrain-trials", type=int, default=2)
    ap.add_argument("--trials", type=int, default=2, help="finetune trials per variant")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    bc.quiet_env()
    data = reuse_spec(bc.spec_dict(args.spec, args.overrides), args.epochs, args.pretrain_trials, args.trials)
    with bc.temp_dir("reuse") as tmp:
        spec_path = bc.write_spec(data, Path(tmp))
        run = run_study(spec_path, Path(tmp) / "study", args.data_dir)
        results = json.loads((Path(tmp) / "study" / "results.json").read_text())
        tuners = sorted(p.name for p in (Path(tmp) / "study" / "ray_results").iterdir() if p.is_dir())
    out = {"machine": bc.machine(), "args": {k: v for k, v in vars(args).items() if k != "json"},
           "tuners": tuners, **summarize(results, run, len(data["variants"]))}
    bc.print_table(["stage", "seconds", "share"], [(k, v, f"{100 * v / out['study_total_s']:.1f}%")
                                                   for k, v in out["stage_seconds"].items()])
    print(f"pretraining stages run: {out['pretrain_stage_runs']} for {out['finetune_variants_from_spt']} SPT variants; "
          f"total {out['study_total_s']:.1f}s vs {out['total_without_reuse_s']:.1f}s if each variant pretrained "
          f"(saves {100 * out['saving_fraction']:.1f}%)")
    bc.write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
