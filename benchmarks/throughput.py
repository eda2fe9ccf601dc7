"""Model FLOP/s of sptune's training step vs this machine's float32 matmul rate, plus scaling tables.

All timings are sptune's own `FinetuneLoop.train_epoch` (forward, loss, backward, grad clip,
AdamW, LR schedule) on in-memory data, after a warm-up epoch on the same loop:

  flops        analytic matmul FLOPs per step (embedding, Q/K/V/out projections, attention scores
               and weighted sum, MLP, classifier head; x3 for forward + backward) / measured step
               time, as a fraction of a large float32 torch.matmul timed in the same run, for the
               Image config (d64 x 3 layers, 1,024 tokens) and the ListOps config (d512 x 6 layers,
               8 heads, ffn 1024) at a short sequence; at 1 thread (one trial's share) and 2 threads
  seq          time per step vs sequence length 256 ... 4,096 (Image model, fixed batch), with the
               memory the attention op keeps for backward (torch.profiler, profile_memory) and the
               process's peak RSS
  dataset      time per epoch vs training-set size (Image model at 16x16; real CIFAR with --data-dir)
  layouts      two trials on 2 cores: 2 processes x 1 thread (concurrent) vs 1 process x 2 threads
               (back to back) vs 1 x 1 (back to back)

    python benchmarks/throughput.py --data-dir /work/shared/data --json benchmarks/results/throughput.json
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import sys
import time
from pathlib import Path
from typing import Any

import bench_common as bc
import numpy as np
import torch

CONFIGS: dict[str, dict[str, Any]] = {
    # LRA Image (cifar_lr.yaml): continuous pixels, 32x32 = 1,024 tokens.
    "image": {"model": {"d_model": 64, "n_layers": 3, "n_heads": 4, "d_ff": 128}, "kind": "continuous",
              "seq_len": 1024, "batch": 8, "steps": 2},
    # LRA ListOps model size; the real task has 2,000 tokens, cut short so a step fits a CPU budget.
    "listops": {"model": {"d_model": 512, "n_layers": 6, "n_heads": 8, "d_ff": 1024}, "kind": "tokens",
                "seq_len": 256, "batch": 4, "steps": 2, "vocab": 20},
}
LAYOUT_TRIALS = {
    # A digits-sized trial (64 tokens, d64 x 2) and an image-16 trial (256 tokens, d64 x 3).
    "digits-like": {"model": {"d_model": 64, "n_layers": 2, "n_heads": 4, "d_ff": 128}, "seq_len": 64,
                    "rows": 640, "batch": 32, "epochs": 2},
    "image16": {"model": {"d_model": 64, "n_layers": 3, "n_heads": 4, "d_ff": 128}, "seq_len": 256,
                "rows": 160, "batch": 32, "epochs": 2},
}


# ------------------------------------------------------------------ FLOPs

def step_flops(model: dict[str, int], seq_len: int, batch: int, kind: str, classes: int = 10,
               in_channels: int = 2) -> dict[str, float]:
    """Matmul FLOPs (2 per multiply-add) of one training step, by component (forward x3)."""
    d, f, n, L = model["d_model"], model["d_ff"], model["n_layers"], seq_len
    per_seq = {
        "embedding": 0.0 if kind == "tokens" else 2.0 * in_channels * d * L,  # token ids are a lookup
        "qkv_out_proj": n * 4 * 2.0 * d * d * L,
        "attn_scores": n * 2.0 * L * L * d,  # Q K^T, all heads together
        "attn_weighted_sum": n * 2.0 * L * L * d,  # softmax(.) V
        "mlp": n * 2 * 2.0 * d * f * L,
        "head": 2.0 * d * d + 2.0 * d * classes,
    }
    fwd = {k: v * batch for k, v in per_seq.items()}
    return {**{k: 3 * v for k, v in fwd.items()}, "total": 3 * sum(fwd.values())}


def matmul_gflops(threads: int, n: int = 2048, repeats: int = 5) -> dict[str, float]:
    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.matmul(a, b)  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        torch.matmul(a, b)
        times.append(time.perf_counter() - start)
    flops = 2.0 * n**3
    return {"n": n, "best_gflops": flops / min(times) / 1e9, "median_gflops": flops / float(np.median(times)) / 1e9}


# ------------------------------------------------------------------ sptune step timing

def synthetic(kind: str, seq_len: int, rows: int, vocab: int = 20, seed: int = 0) -> tuple[Any, Any]:
    """TaskInfo and an ArraySplit of random data: step time does not depend on the values."""
    from sptune.tasks.base import ArraySplit, TaskInfo

    rng = np.random.default_rng(seed)
    if kind == "tokens":  # ids >= 4 skip the specials, so no padding mask is built
        info = TaskInfo("synthetic-tokens", "tokens", seq_len, 10, vocab_size=vocab)
        x = rng.integers(4, vocab, (rows, seq_len)).astype(np.int64)
    else:
        info = TaskInfo("synthetic-pixels", "continuous", seq_len, 10, levels=256)
        x = rng.integers(0, 256, (rows, seq_len), dtype=np.uint8)
    return info, ArraySplit(x, rng.integers(0, 10, rows).astype(np.int64))


def make_loop(model: dict[str, int], info: Any, train: Any, val: Any, batch: int, epochs: int = 2) -> Any:
    from sptune.spec import ModelSpec
    from sptune.training.loops import FinetuneLoop, OptimConfig
    from sptune.training.model_configs import classifier_config

    cfg = classifier_config(ModelSpec(**model), info)
    # A small LR: these are timing runs, and a divergence would abort them.
    return FinetuneLoop(cfg, info, train, val, OptimConfig(lr=1e-4, batch_size=batch, epochs=epochs))


def seconds_per_step(model: dict[str, int], kind: str, seq_len: int, batch: int, steps: int, threads: int,
                     vocab: int = 20) -> float:
    torch.set_num_threads(threads)
    info, train = synthetic(kind, seq_len, batch * steps, vocab)
    _, val = synthetic(kind, seq_len, 1, vocab, seed=1)
    loop = make_loop(model, info, train, val, batch)
    loop.train_epoch()  # warm-up epoch: first-touch allocations and lazy initialisation
    return loop.train_epoch()["epoch_seconds"] / steps


def flops_section(matmul: dict[int, dict], threads_list: list[int]) -> dict[str, Any]:
    out = {}
    for name, c in CONFIGS.items():
        flops = step_flops(c["model"], c["seq_len"], c["batch"], c["kind"])
        per_threads = {}
        for threads in threads_list:
            step_s = seconds_per_step(c["model"], c["kind"], c["seq_len"], c["batch"], c["steps"], threads,
                                      c.get("vocab", 20))
            achieved = flops["total"] / step_s / 1e9
            per_threads[threads] = {"step_s": step_s, "model_gflops": achieved,
                                    "flops_fraction": achieved / matmul[threads]["best_gflops"]}
            print(f"  {name:<8} threads={threads}: {step_s:.3f} s/step, {achieved:.1f} GFLOP/s, "
                  f"{per_threads[threads]['flops_fraction']:.3f} of matmul", flush=True)
        out[name] = {**{k: v for k, v in c.items() if k != "steps"}, "gflop_per_step": flops["total"] / 1e9,
                     "flops_by_component_gflop": {k: v / 1e9 for k, v in flops.items()}, "threads": per_threads}
    return out


# ------------------------------------------------------------------ sequence-length scaling

def attention_memory_mb(loop: Any, batch: int) -> float:
    """Bytes the attention ops keep alive after one training forward (saved for backward)."""
    from torch.profiler import ProfilerActivity, profile

    x, y = loop.train_x[:batch], loop.train_y[:batch]
    loop.model.train()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        loss = loop.batch_loss(x, y)
    del loss
    mem = sum(e.cpu_memory_usage for e in prof.key_averages() if e.key == "aten::scaled_dot_product_attention")
    return mem / 2**20


def seq_section(lengths: list[int], batch: int, steps: int, threads: int) -> list[dict[str, Any]]:
    model = CONFIGS["image"]["model"]
    rows = []
    for L in lengths:
        torch.set_num_threads(threads)
        info, train = synthetic("continuous", L, batch * steps)
        _, val = synthetic("continuous", L, 1, seed=1)
        loop = make_loop(model, info, train, val, batch)
        loop.train_epoch()
        step_s = loop.train_epoch()["epoch_seconds"] / steps
        attn_mb = attention_memory_mb(loop, batch)
        flops = step_flops(model, L, batch, "continuous")
        rows.append({"seq_len": L, "batch": batch, "step_s": step_s, "s_per_1k_tokens": step_s / (batch * L) * 1e3,
                     "attention_share_of_flops": (flops["attn_scores"] + flops["attn_weighted_sum"]) / flops["total"],
                     "model_gflops": flops["total"] / step_s / 1e9, "attention_saved_mb": attn_mb,
                     "attn_matrix_mb_per_layer": batch * model["n_heads"] * L * L * 4 / 2**20,
                     "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})
        print(f"  L={L:<5} {step_s:.3f} s/step  attention keeps {attn_mb:.0f} MB", flush=True)
        del loop
    base = rows[0]
    for r in rows:
        r["step_ratio_vs_first"] = r["step_s"] / base["step_s"]
        r["length_ratio_vs_first"] = r["seq_len"] / base["seq_len"]
    return rows


# ------------------------------------------------------------------ dataset-size scaling

def image16(data_dir: str | None, rows: int) -> tuple[Any, Any, Any, str]:
    """CIFAR at 16x16 when the data is there (else random pixels of the same shape)."""
    if data_dir:
        from sptune.spec import load_spec

        spec = load_spec(bc.SPECS / "cifar_lr.yaml", ["task.resolution=16", f"task.max_train={rows}"])
        data = bc.load_data(spec, data_dir)
        return data.info, data.train, data.val, "cifar10_gray 16x16"
    info, train = synthetic("continuous", 256, rows)
    _, val = synthetic("continuous", 256, 500, seed=1)
    return info, train, val, "random pixels 16x16"


def dataset_section(sizes: list[int], data_dir: str | None, threads: int) -> dict[str, Any]:
    from sptune.tasks.base import ArraySplit

    torch.set_num_threads(threads)
    model, rows, source = CONFIGS["image"]["model"], [], ""
    for n in sizes:
        info, train, val, source = image16(data_dir, n)
        small_val = ArraySplit(val.x[:64], val.y[:64])  # validation is not what this table measures
        loop = make_loop(model, info, train, small_val, batch=32)
        epoch_s = loop.train_epoch()["epoch_seconds"]
        rows.append({"train_rows": len(train), "epoch_s": epoch_s, "ms_per_row": 1e3 * epoch_s / len(train)})
        print(f"  rows={len(train):<6} {epoch_s:.2f} s/epoch", flush=True)
    n, t = np.array([r["train_rows"] for r in rows], float), np.array([r["epoch_s"] for r in rows])
    slope, intercept = np.polyfit(n, t, 1)
    fit = slope * n + intercept
    r2 = 1 - float(((t - fit) ** 2).sum() / ((t - t.mean()) ** 2).sum())
    return {"source": source, "rows": rows, "linear_fit": {"s_per_row": slope, "intercept_s": intercept, "r2": r2}}


# ------------------------------------------------------------------ trials x threads layouts

def layout_worker(trial: dict[str, Any], threads: int, trials: int, barrier: Any, results: Any) -> None:
    """One process: build the data, wait for the others, then run `trials` trials back to back."""
    torch.set_num_threads(threads)
    info, train = synthetic("continuous", trial["seq_len"], trial["rows"])
    _, val = synthetic("continuous", trial["seq_len"], 64, seed=1)
    barrier.wait()
    start = time.perf_counter()
    for _ in range(trials):
        loop = make_loop(trial["model"], info, train, val, trial["batch"], trial["epochs"])
        for _ in range(trial["epochs"]):
            loop.train_epoch()
    results.put(time.perf_counter() - start)


def run_layout(trial: dict[str, Any], processes: int, threads: int, trials_each: int) -> float:
    """Wall seconds from the moment every process is ready until the last one finishes."""
    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(processes), ctx.Queue()
    procs = [ctx.Process(target=layout_worker, args=(trial, threads, trials_each, barrier, results))
             for _ in range(processes)]
    for p in procs:
        p.start()
    walls = [results.get() for _ in procs]
    for p in procs:
        p.join()
    return max(walls)


def layouts_section() -> dict[str, Any]:
    out = {}
    for name, trial in LAYOUT_TRIALS.items():
        walls = {"2 procs x 1 thread (concurrent)": run_layout(trial, 2, 1, 1),
                 "1 proc x 2 threads (back to back)": run_layout(trial, 1, 2, 2),
                 "1 proc x 1 thread (back to back)": run_layout(trial, 1, 1, 2)}
        best = min(walls, key=walls.get)
        out[name] = {"trial": trial, "wall_s_for_2_trials": walls, "best": best,
                     "speedup_2x1_over_1x2": walls["1 proc x 2 threads (back to back)"]
                     / walls["2 procs x 1 thread (concurrent)"]}
        print(f"  {name}: " + ", ".join(f"{k}: {v:.2f}s" for k, v in walls.items()), flush=True)
    return out


# ------------------------------------------------------------------ report

def print_report(out: dict[str, Any]) -> None:
    print("\nmatmul float32: " + ", ".join(f"{t} thread(s) {m['best_gflops']:.1f} GFLOP/s"
                                           for t, m in out["matmul"].items()))
    for section, show in (("configs", _print_configs), ("seq", _print_seq), ("dataset", _print_dataset),
                          ("layouts", _print_layouts)):
        if section in out:
            print()
            show(out[section])


def _print_configs(configs: dict[str, Any]) -> None:
    rows = [(name, c["seq_len"], c["batch"], c["gflop_per_step"], t, r["step_s"], r["model_gflops"],
             r["flops_fraction"]) for name, c in configs.items() for t, r in c["threads"].items()]
    bc.print_table(["config", "L", "batch", "GFLOP/step", "threads", "s/step", "GFLOP/s", "flops_fraction"], rows)


def _print_seq(seq: list[dict[str, Any]]) -> None:
    bc.print_table(["seq_len", "s/step", "x vs 256", "s/1k tok", "attn FLOP share", "attn saved MB", "peak RSS MB"],
                   [(r["seq_len"], r["step_s"], r["step_ratio_vs_first"], r["s_per_1k_tokens"],
                     r["attention_share_of_flops"], r["attention_saved_mb"], r["peak_rss_mb"]) for r in seq])


def _print_dataset(d: dict[str, Any]) -> None:
    bc.print_table(["train rows", "s/epoch", "ms/row"], [(r["train_rows"], r["epoch_s"], r["ms_per_row"])
                                                         for r in d["rows"]])
    print(f"  linear fit: {1e3 * d['linear_fit']['s_per_row']:.2f} ms/row + {d['linear_fit']['intercept_s']:.2f} s, "
          f"R^2 = {d['linear_fit']['r2']:.4f} ({d['source']})")


def _print_layouts(layouts: dict[str, Any]) -> None:
    for name, r in layouts.items():
        print(f"  layouts {name}: best = {r['best']}; 2x1 is {r['speedup_2x1_over_1x2']:.2f}x the throughput of 1x2")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", help="folder with cifar10_gray.npz (dataset-size table); random pixels without")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--seq-lens", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096])
    ap.add_argument("--seq-batch", type=int, default=2)
    ap.add_argument("--seq-steps", type=int, default=2)
    ap.add_argument("--sizes", type=int, nargs="+", default=[128, 256, 512, 1024])
    ap.add_argument("--skip", nargs="*", default=[], choices=["flops", "seq", "dataset", "layouts"])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    out: dict[str, Any] = {"machine": bc.machine()}
    print("matmul rate ...", flush=True)
    out["matmul"] = {t: matmul_gflops(t) for t in sorted(set(args.threads) | {1})}
    if "flops" not in args.skip:
        print("model FLOP/s ...", flush=True)
        out["configs"] = flops_section(out["matmul"], args.threads)
        one = min(args.threads)  # one trial's share of the cores (resources.cpu = 1)
        out["flops_fraction"] = {k: v["threads"][one]["flops_fraction"] for k, v in out["configs"].items()}
    if "seq" not in args.skip:
        print(f"sequence length (1 thread, batch {args.seq_batch}) ...", flush=True)
        out["seq"] = seq_section(args.seq_lens, args.seq_batch, args.seq_steps, 1)
    if "dataset" not in args.skip:
        print("dataset size (1 thread) ...", flush=True)
        out["dataset"] = dataset_section(args.sizes, args.data_dir, 1)
    if "layouts" not in args.skip:
        print("trials x threads layouts ...", flush=True)
        out["layouts"] = layouts_section()
    out["machine"]["load_avg_at_end"] = os.getloadavg()
    print_report(out)
    bc.write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
