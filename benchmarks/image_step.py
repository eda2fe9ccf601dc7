"""CPU throughput of one training step, before vs after the step optimisations, side by side in one run.

For the Image config (d64 x 3 layers x 4 heads, ffn 128, 1,024 tokens, batch 8) and the ListOps
config of `throughput.py` (d512 x 6 x 8 heads, ffn 1024, 256 tokens, batch 4), 1 thread:

  profile   torch.profiler over the Image training step (forward, loss, backward, grad clip, AdamW,
            LR schedule) in train mode: the top operators by self time and the step by category
            (attention forward/backward, dropout's random draws, linear layers, ...). On a shared
            machine an op can be descheduled mid-call, so every op's self time is the minimum over
            `--profile-reps` profiled runs of `--profile-steps` steps each.
  arms      one long-lived worker process per arm and config, each with its own loop
            (`FinetuneLoop`, as a trial builds it). The parent runs them in turn, round by round
            (ABAB...): in each round a worker times a float32 2048^3 matmul (best of 3: this round's
            peak) and then `--steps` training steps. Per round: seconds per step (wall and the
            thread's CPU time, which a busy machine inflates far less) and flops_fraction =
            analytic step FLOPs (`throughput.step_flops`) / step time / matmul rate, both in the same
            clock. Reported: medians over rounds.

Arms ("before" is the code as it was, kept here as switches; "after" is sptune as shipped):
  before       PyTorch's own CPU dropout (`bernoulli_` masks), as sptune was until round 2 session 10
  after        sptune's defaults: fused AdamW on CPU (`sptune.training.loops.FUSED_ADAMW_ON_CPU`) and the
               cheaper dropout mask (`sptune.training.models.dropout.FAST_CPU_DROPOUT`)
  after+compile (with --compile) after + `training.compile: true` (torch.compile, inductor C++):
               its compile time and step time
(The fused-AdamW change was timed the same way with `git show 71008b1:benchmarks/image_step.py`,
whose "before" is AdamW unfused.)

    python benchmarks/image_step.py --json benchmarks/results/image_step.json
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing as mp
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import bench_common as bc
import torch
from throughput import CONFIGS, step_flops, synthetic

ARMS: dict[str, dict[str, bool]] = {
    "before": {"fused_adamw": True, "fast_dropout": False, "compile": False},
    "after": {"fused_adamw": True, "fast_dropout": True, "compile": False},
    "after+compile": {"fused_adamw": True, "fast_dropout": True, "compile": True},
}


# ------------------------------------------------------------------ one arm's worker process

def build_loop(config: dict[str, Any], arm: dict[str, bool]) -> Any:
    """A FinetuneLoop as a trial builds it, with the arm's switches applied."""
    import sptune.training.loops as train
    import sptune.training.models.dropout as dropout
    from sptune.spec import ModelSpec
    from sptune.training.model_configs import classifier_config

    train.FUSED_ADAMW_ON_CPU = arm["fused_adamw"]  # module switches: each arm runs in its own process
    dropout.FAST_CPU_DROPOUT = arm["fast_dropout"]
    kind, rows = config["kind"], config["batch"] * 4
    info, split = synthetic(kind, config["seq_len"], rows, config.get("vocab", 20))
    _, val = synthetic(kind, config["seq_len"], 1, config.get("vocab", 20), seed=1)
    cfg = classifier_config(ModelSpec(**config["model"]), info)
    # A small LR: these are timing runs, and a divergence would abort them.
    optim = train.OptimConfig(lr=1e-4, batch_size=config["batch"], epochs=100, compile=arm["compile"])
    loop = train.FinetuneLoop(cfg, info, split, val, optim)
    loop.model.train()
    return loop


def matmul_rate(n: int = 2048, repeats: int = 3) -> dict[str, float]:
    """GFLOP/s of the best of `repeats` n^3 float32 matmuls, by wall clock and by thread CPU time."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    wall, cpu = [], []
    for _ in range(repeats):
        w, c = time.perf_counter(), time.thread_time()
        torch.matmul(a, b)
        cpu.append(time.thread_time() - c)
        wall.append(time.perf_counter() - w)
    flops = 2.0 * n**3
    return {"wall": flops / min(wall) / 1e9, "cpu": flops / min(cpu) / 1e9}


def timed_steps(loop: Any, steps: int) -> dict[str, list[float]]:
    x, y = loop.train_x[: loop.cfg.batch_size], loop.train_y[: loop.cfg.batch_size]
    wall, cpu = [], []
    with loop._own_rng():  # dropout draws from the loop's stream, as in train_epoch
        for _ in range(steps):
            w, c = time.perf_counter(), time.thread_time()
            batch = loop.train_batch(x, y)
            loop._step(batch.loss)
            cpu.append(time.thread_time() - c)
            wall.append(time.perf_counter() - w)
    return {"wall": wall, "cpu": cpu}


def attention_only(config: dict[str, Any]) -> dict[str, float]:
    """One layer's SDPA forward + backward on the step's shapes, as SelfAttention calls it ((B, N, H, D)
    views transposed), timed alone: with the step time of the same round it gives attention's
    share of the step without a profiler, whose per-op overhead and clock a busy machine distorts."""
    m = config["model"]
    b, n, h, d = config["batch"], config["seq_len"], m["n_heads"], m["d_model"] // m["n_heads"]
    q, k, v = (torch.randn(b, n, h, d, requires_grad=True) for _ in range(3))
    grad = torch.randn(b, n, h, d)
    w, c = time.perf_counter(), time.thread_time()
    out = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
    out.transpose(1, 2).backward(grad)
    return {"cpu": (time.thread_time() - c) * m["n_layers"], "wall": (time.perf_counter() - w) * m["n_layers"]}


def worker(conn: Any, config: dict[str, Any], arm: dict[str, bool], threads: int, warmup: int) -> None:
    """Build the loop, warm it up (and compile it), then answer one round per message until None."""
    torch.set_num_threads(threads)
    start = time.perf_counter()
    loop = build_loop(config, arm)
    warm = timed_steps(loop, warmup)  # first touches, lazy init, and torch.compile's compilation
    conn.send({"setup_s": time.perf_counter() - start, "warmup_wall": warm["wall"], "warmup_cpu": warm["cpu"]})
    while (steps := conn.recv()) is not None:
        rate = matmul_rate()
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        timed = timed_steps(loop, steps)
        # Page faults per step: fresh pages for activations would show here (glibc reuses them: ~0).
        minflt = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / steps
        attention = [attention_only(config) for _ in range(2)]
        conn.send({"matmul_gflops": rate, "minor_faults_per_step": minflt, **timed,
                   "attention_s": {k: min(a[k] for a in attention) for k in ("cpu", "wall")}})


# ------------------------------------------------------------------ the parent: rounds, ABAB

def run_config(name: str, arms: list[str], rounds: int, steps: int, threads: int, warmup: int) -> dict[str, Any]:
    config = CONFIGS[name]
    ctx = mp.get_context("spawn")
    pipes, procs, setup = {}, [], {}
    for arm in arms:
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=worker, args=(child, config, ARMS[arm], threads, warmup), daemon=True)
        proc.start()
        # One worker builds and warms up (and compiles) at a time: set-ups never overlap each other.
        setup[arm] = parent.recv()
        pipes[arm] = parent
        procs.append(proc)
    per_round: dict[str, list[dict[str, Any]]] = {arm: [] for arm in arms}
    for r in range(rounds):
        order = arms if r % 2 == 0 else arms[::-1]  # ABBA...: neither arm always goes first
        for arm in order:
            pipes[arm].send(steps)
            per_round[arm].append(pipes[arm].recv())
    for arm in arms:
        pipes[arm].send(None)
    for proc in procs:
        proc.join()
    flops = step_flops(config["model"], config["seq_len"], config["batch"], config["kind"])["total"]
    return {"config": {k: v for k, v in config.items() if k != "steps"}, "gflop_per_step": flops / 1e9,
            "arms": {arm: summarize(per_round[arm], setup[arm], flops) for arm in arms}}


def summarize(rounds: list[dict[str, Any]], setup: dict[str, Any], flops: float) -> dict[str, Any]:
    """Medians over rounds of each round's median step, and of each round's flops_fraction."""
    out: dict[str, Any] = {"setup_s": setup["setup_s"], "warmup_step_s": setup["warmup_wall"], "rounds": rounds}
    for clock in ("wall", "cpu"):
        steps = [statistics.median(r[clock]) for r in rounds]
        fractions = [flops / s / 1e9 / r["matmul_gflops"][clock] for s, r in zip(steps, rounds, strict=True)]
        attn = [r["attention_s"][clock] for r in rounds]
        out[clock] = {"step_s": statistics.median(steps), "flops_fraction": statistics.median(fractions),
                      "matmul_gflops": statistics.median(r["matmul_gflops"][clock] for r in rounds),
                      # every layer's SDPA forward + backward, timed alone, as a share of the step
                      "attention_s": statistics.median(attn),
                      "attention_share": statistics.median(a / s for a, s in zip(attn, steps, strict=True))}
    out["minor_faults_per_step"] = statistics.median(r["minor_faults_per_step"] for r in rounds)
    return out


# ------------------------------------------------------------------ profile of the Image step

# Operator -> category, first match wins (aten names as torch.profiler reports them).
CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("attention backward (SDPA flash, CPU)", ("flash_attention_for_cpu_backward",)),
    ("attention forward (SDPA flash, CPU)", ("flash_attention_for_cpu",)),
    ("dropout random draws (bernoulli_, random_)", ("aten::bernoulli_", "aten::random_")),
    ("linear layers (mm, addmm)", ("aten::mm", "aten::addmm")),
    ("optimizer + grad clip", ("Optimizer.", "_fused_adamw", "aten::lerp", "aten::addcmul", "vector_norm",
                               "aten::sqrt", "aten::_foreach")),
    ("copies (addmm's bias into its output under torch.profiler; casts)", ("aten::copy_", "aten::_to_copy")),
    ("GELU, LayerNorm (fwd + bwd)", ("gelu", "layer_norm")),
    ("elementwise (dropout scale/mask, residual adds, grad sums)",
     ("aten::mul", "aten::div", "aten::add", "aten::sum", "aten::fill_", "aten::ge")),
)


def category(op: str) -> str:
    for name, keys in CATEGORIES:
        if any(k in op for k in keys):
            return name
    return "other (views, autograd bookkeeping, loss, pooling)"


def profile_section(arm: str, steps: int, reps: int, top: int, threads: int) -> dict[str, Any]:
    """Per-op self CPU time of `steps` Image steps: the minimum over `reps` profiled runs."""
    from torch.profiler import ProfilerActivity, profile

    torch.set_num_threads(threads)  # as the arms' workers: a spawned process starts with every core
    loop = build_loop(CONFIGS["image"], ARMS[arm])
    timed_steps(loop, 2)  # warm-up
    best: dict[str, float] = {}
    calls: dict[str, int] = {}
    for _ in range(reps):
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            timed_steps(loop, steps)
        for e in prof.key_averages():
            best[e.key] = min(best.get(e.key, float("inf")), e.self_cpu_time_total / 1e6 / steps)
            calls[e.key] = e.count // steps
    return summarize_ops(best, calls, arm, steps, top, clock=f"torch.profiler wall, min of {reps} runs")


def in_subprocess(fn: Any, *args: Any) -> Any:
    """fn(*args) in a fresh process: an arm's process-wide settings must not leak into the next."""
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


class CpuTimeOps:
    """Thread CPU time per aten op (a TorchDispatchMode): unlike torch.profiler's wall clock, an op
    that is descheduled by another process's work is not charged for the wait. Each op is timed
    once (ops an op calls internally are inside its time); the backward pass runs on this thread
    on CPU, so its ops are counted too."""

    def __init__(self) -> None:
        from torch.utils._python_dispatch import TorchDispatchMode

        seconds: dict[str, float] = {}
        calls: dict[str, int] = {}

        class Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
                start = time.thread_time()
                out = func(*args, **(kwargs or {}))
                name = f"aten::{func.__name__.split('.')[0]}"
                seconds[name] = seconds.get(name, 0.0) + time.thread_time() - start
                calls[name] = calls.get(name, 0) + 1
                return out

        self.mode, self.seconds, self.calls = Mode(), seconds, calls


def cpu_profile_section(arm: str, steps: int, top: int, threads: int) -> dict[str, Any]:
    """Per-op thread CPU time over `steps` Image steps, and the step's CPU time outside aten ops.
    With more than one thread an op's other threads' work would be missing from the calling
    thread's clock: run it with --threads 1 (the default)."""
    torch.set_num_threads(threads)
    loop = build_loop(CONFIGS["image"], ARMS[arm])
    timed_steps(loop, 2)  # warm-up
    ops = CpuTimeOps()
    with ops.mode:
        step_cpu = sum(timed_steps(loop, steps)["cpu"]) / steps
    per_step = {k: v / steps for k, v in ops.seconds.items()}
    per_step["(outside aten ops: Python, autograd engine, dispatch-mode overhead)"] = step_cpu - sum(per_step.values())
    return summarize_ops(per_step, {k: v // steps for k, v in ops.calls.items()}, arm, steps, top, clock="thread CPU")


def summarize_ops(per_step: dict[str, float], calls: dict[str, int], arm: str, steps: int, top: int,
                  clock: str) -> dict[str, Any]:
    total = sum(per_step.values())
    by_cat: dict[str, float] = {}
    for op, s in per_step.items():
        by_cat[category(op)] = by_cat.get(category(op), 0.0) + s
    ops = sorted(per_step, key=lambda k: -per_step[k])[:top]
    return {"arm": arm, "clock": clock, "steps": steps, "step_s": total,
            "top_ops": [{"op": k, "s_per_step": per_step[k], "share": per_step[k] / total,
                         "calls_per_step": calls.get(k, 0)} for k in ops],
            "categories": {k: {"s_per_step": v, "share": v / total}
                           for k, v in sorted(by_cat.items(), key=lambda kv: -kv[1])}}


# ------------------------------------------------------------------ report

def print_profile(p: dict[str, Any]) -> None:
    print(f"\nImage step profile ({p['arm']}, {p['clock']}): {p['step_s']:.3f} s per step")
    bc.print_table(["op", "s/step", "share", "calls/step"],
                   [(o["op"][:58], o["s_per_step"], f"{100 * o['share']:.1f}%", o["calls_per_step"])
                    for o in p["top_ops"]])
    print()
    bc.print_table(["category", "s/step", "share"],
                   [(k, v["s_per_step"], f"{100 * v['share']:.1f}%") for k, v in p["categories"].items()])


def print_arms(results: dict[str, Any]) -> None:
    rows = []
    for name, r in results.items():
        base = r["arms"]["before"]
        for arm, a in r["arms"].items():
            rows.append((name, arm, a["wall"]["step_s"], a["wall"]["flops_fraction"], a["cpu"]["step_s"],
                         a["cpu"]["flops_fraction"], base["cpu"]["step_s"] / a["cpu"]["step_s"],
                         a["cpu"]["attention_share"], a["minor_faults_per_step"], a["setup_s"]))
    print()
    bc.print_table(["config", "arm", "wall s/step", "wall fraction", "cpu s/step", "cpu fraction",
                    "speed-up (cpu)", "attention share (cpu)", "faults/step", "setup s"], rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", nargs="+", default=["image", "listops"], choices=sorted(CONFIGS))
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--steps", type=int, default=3, help="timed steps per round")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--compile", action="store_true", help="add the after+compile arm")
    ap.add_argument("--profile-steps", type=int, default=2)
    ap.add_argument("--profile-reps", type=int, default=3)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--skip-profile", action="store_true")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    arms = ["before", "after"] + (["after+compile"] if args.compile else [])
    out: dict[str, Any] = {"machine": bc.machine(), "threads": args.threads, "rounds": args.rounds,
                           "steps_per_round": args.steps, "arms_definition": {a: ARMS[a] for a in arms}}
    start = time.perf_counter()
    if not args.skip_profile:
        out["profile_cpu"] = {arm: in_subprocess(cpu_profile_section, arm, args.profile_steps, args.top, args.threads)
                              for arm in ("before", "after")}
        out["profile_torch"] = {arm: in_subprocess(profile_section, arm, args.profile_steps, args.profile_reps,
                                                   args.top, args.threads) for arm in ("before", "after")}
        for p in (*out["profile_cpu"].values(), *out["profile_torch"].values()):
            print_profile(p)
    out["configs"] = {}
    for name in args.configs:
        print(f"\n{name}: {args.rounds} rounds x {len(arms)} arms x {args.steps} steps ...", flush=True)
        out["configs"][name] = run_config(name, arms, args.rounds, args.steps, args.threads, args.warmup)
    print_arms(out["configs"])
    return bc.finish(args.json, out, start)


if __name__ == "__main__":
    sys.exit(main())
