"""Where one sptune training step spends its time on CPU (torch.profiler), for the digits and Image configs.

Backs the explanations in BENCHMARKS.md: per config, the top operators by self CPU time over a
few `FinetuneLoop` steps (after a warm-up epoch) with the specs' defaults (dropout 0.1,
attention_dropout 0), the totals of the attention op (forward) and of the AdamW step, and the
step time with attention dropout 0.1 vs 0.0 -- with attention dropout PyTorch's CPU SDPA cannot
use its fused (flash) kernel and falls back to the math path, which materialises the L x L
attention matrices; that is why `model.attention_dropout` defaults to 0.

    python benchmarks/step_profile.py --json benchmarks/results/step_profile.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import bench_common as bc
import torch
from throughput import make_loop, synthetic
from torch.profiler import ProfilerActivity, profile

CONFIGS = {
    "digits": {"model": {"d_model": 64, "n_layers": 2, "n_heads": 4, "d_ff": 128}, "seq_len": 64, "batch": 32,
               "steps": 8},
    "image": {"model": {"d_model": 64, "n_layers": 3, "n_heads": 4, "d_ff": 128}, "seq_len": 1024, "batch": 8,
              "steps": 2},
}
TOTALS = ("aten::scaled_dot_product_attention", "Optimizer.step#AdamW.step", "aten::linear")


def build(config: dict[str, Any], attention_dropout: float) -> Any:
    info, train = synthetic("continuous", config["seq_len"], config["batch"] * config["steps"])
    _, val = synthetic("continuous", config["seq_len"], 1, seed=1)
    model = {**config["model"], "dropout": 0.1, "attention_dropout": attention_dropout}
    loop = make_loop(model, info, train, val, config["batch"])
    loop.train_epoch()  # warm-up
    return loop


def profile_steps(config: dict[str, Any], top: int) -> dict[str, Any]:
    loop = build(config, 0.0)  # the default
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        loop.train_epoch()
    events = prof.key_averages()
    total_self = sum(e.self_cpu_time_total for e in events)
    ops = sorted(events, key=lambda e: -e.self_cpu_time_total)[:top]
    return {
        "self_cpu_s_total": total_self / 1e6,
        "top_ops": [{"op": e.key, "self_s": e.self_cpu_time_total / 1e6, "share": e.self_cpu_time_total / total_self,
                     "calls": e.count} for e in ops],
        "totals_s": {e.key: e.cpu_time_total / 1e6 for e in events if e.key in TOTALS},
    }


def dropout_effect(config: dict[str, Any]) -> dict[str, float]:
    times = {}
    for p in (0.1, 0.0):
        loop = build(config, p)
        times[f"attention_dropout_{p}"] = loop.train_epoch()["epoch_seconds"] / config["steps"]
    return {**times, "speedup_without_dropout": times["attention_dropout_0.1"] / times["attention_dropout_0.0"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    out: dict[str, Any] = {"machine": bc.machine(), "threads": args.threads, "configs": {}}
    for name in args.configs:
        config = CONFIGS[name]
        prof = profile_steps(config, args.top)
        out["configs"][name] = {**config, **prof, "step_s_by_dropout": dropout_effect(config)}
        print(f"\n{name}: L={config['seq_len']} batch={config['batch']} ({config['steps']} steps profiled)")
        bc.print_table(["op", "self s", "share", "calls"],
                       [(o["op"][:50], o["self_s"], f"{100 * o['share']:.1f}%", o["calls"]) for o in prof["top_ops"]])
        print("  totals (incl. children): " + ", ".join(f"{k} {v:.3f}s" for k, v in prof["totals_s"].items()))
        d = out["configs"][name]["step_s_by_dropout"]
        print(f"  s/step: attention dropout 0.1 {d['attention_dropout_0.1']:.3f}, 0.0 {d['attention_dropout_0.0']:.3f} "
              f"({d['speedup_without_dropout']:.2f}x)")
    bc.write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
