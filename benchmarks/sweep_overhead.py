"""A whole sptune sweep (Ray Tune + MLflow) vs the SAME trials run by hand with sptune.training.loops's loops.

The sweep is digits_quick (both variants, 3-seed re-runs) with a reduced budget and a FIFO
scheduler, so every trial runs all its epochs and the plain arm can replay exactly the configs
the sweep ran (read back from ``ray_results/*/*/params.json``), phase by phase with barriers
(pretraining; both variants' searches, the spt variant starting from the plain arm's own
validation-best SPT state; the seed re-runs), while the sweep runs them all in one Tuner; the same
epochs, the same validation each epoch, selection per variant, and the same single test
evaluation of each selected model at the end.

Fairness (same cores, same threads per trial, in both arms):
  serial    sptune with resources.max_concurrent=1 (1 thread per trial) vs one process, 1 thread.
  parallel  sptune with 2 concurrent trials x 1 thread vs a 2-process pool (1 thread each) with the
            same stage barriers.
Ray start/stop and the pool's start are timed separately and left out of both walls, and so are the
imports both arms need (torch, the training code, the data's library: `warm_common_libraries`).
``overhead_fraction`` = (sptune wall - plain wall) / plain wall, for the serial layout at the
largest --epochs (every run is under ``runs``). Two sizes separate the fixed cost per study from
the cost per trial-epoch (``fixed_cost_fit``).

    python benchmarks/sweep_overhead.py --json benchmarks/results/sweep_overhead.json
"""

from __future__ import annotations

import argparse
import copy
import json
import multiprocessing as mp
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import bench_common as bc

LAYOUTS = {"serial": 1, "parallel": 2}  # concurrent trials (each 1 thread) on the 2 cores


@dataclass(frozen=True)
class Job:
    """One trial as the sweep ran it."""

    phase: str  # "pretrain" | "search" | "rerun"
    variant: str
    lr: float
    batch_size: int
    seed: int
    epochs: int


# ------------------------------------------------------------------ sptune arm

def sweep_overrides(data: dict[str, Any], epochs: int | None, pretrain_trials: int, trials: int,
                    concurrent: int) -> list[str]:
    if epochs is None:  # --as-shipped: the spec's own budget and scheduler (ASHA stops are replayed)
        return ["resources.cpu=1", f"resources.max_concurrent={concurrent}"]
    sets = ["scheduler.type=fifo", f"pretrain.epochs={epochs}", f"pretrain.num_samples={pretrain_trials}",
            f"finetune.epochs={epochs}", "resources.cpu=1", f"resources.max_concurrent={concurrent}"]
    for name in data["variants"]:
        sets += [f"variants.{name}.num_samples={trials}", f"variants.{name}.epochs={epochs}"]
    if trials < 2:  # the spec's seed-robust selection re-trains its 2 best configs: one trial has one
        sets += ["selection.top_k=1"]
    return sets


def run_sptune(spec_path: Path, data_dir: str | None, out: Path) -> dict[str, Any]:
    """sptune.sweep.main on an already running Ray, so Ray's start is timed on its own."""
    from sptune.sweep import main

    argv = [str(spec_path), "--output", str(out)] + (["--data-dir", data_dir] if data_dir else [])
    ray_start = bc.start_ray(2)
    try:
        with bc.CpuSampler() as cpu:
            start = time.perf_counter()
            code = main(argv)
            wall = time.perf_counter() - start
    finally:
        ray_stop = bc.stop_ray()
    if code != 0:
        raise SystemExit(f"sptune sweep failed with exit status {code}")
    return {"wall_s": wall, "ray_start_s": ray_start, "ray_shutdown_s": ray_stop, "cpu_s": cpu.total(),
            "cpu_s_by_process": cpu.by_role()}


def _last_result(trial_dir: Path) -> dict[str, Any]:
    lines = (trial_dir / "result.json").read_text().strip().splitlines()
    return json.loads(lines[-1])


def sweep_trials(out: Path) -> tuple[list[list[Job]], dict[str, float]]:
    """The trials the sweep ran, grouped by phase in run order (the plain arm's barriers: pretraining,
    then every variant's search, then the re-runs), and in-trial seconds per stage of the study's Tuner."""
    by_phase: dict[str, list[Job]] = {"pretrain": [], "search": [], "rerun": []}
    in_trial: dict[str, float] = {}
    for params in sorted(out.glob("ray_results/*/*/params.json")):
        c, last = json.loads(params.read_text()), _last_result(params.parent)
        by_phase[c["phase"]].append(Job(c["phase"], c["variant"], float(c["lr"]), int(c["batch_size"]),
                                        int(c["seed"]), int(last["training_iteration"])))
        stage = c.get("stage", params.parent.parent.name)  # one Tuner names each trial's stage
        in_trial[stage] = in_trial.get(stage, 0.0) + float(last["time_total_s"])  # inside its step() calls
    return [jobs for jobs in by_phase.values() if jobs], in_trial


# ------------------------------------------------------------------ plain arm

_WORKER: dict[str, Any] = {}


def init_worker(data: dict[str, Any], data_dir: str | None, threads: int) -> None:
    """Per process: spec, data and thread count (the pool's workers and the serial arm alike)."""
    import torch

    import sptune.training.loops
    import sptune.training.model_configs
    import sptune.training.variants  # noqa: F401  (imported here so no timed trial pays for first imports)
    from sptune.spec import from_dict

    torch.set_num_threads(threads)
    spec = from_dict(data)
    _WORKER.update(spec=spec, data=bc.load_data(spec, data_dir))


def warm_common_libraries(data: dict[str, Any], data_dir: str | None) -> None:
    """Import what both arms need before any training, and load the task's data once, untimed: torch,
    the training code, and the data's own library (scikit-learn for digits). Until 2026-11-23 the sptune
    arm, run first, paid those imports inside its wall while the plain arm, run second in the same
    process, found them done (study_timeline.py's cProfile showed them): ~1.5 s of the 4-epoch sweep's
    "overhead" was the order of the arms (BENCHMARKS.md §2). What sptune adds (Ray Tune, MLflow,
    Optuna, the report) is still imported inside its wall."""
    import sptune.training.loops
    import sptune.training.model_configs
    import sptune.training.variants  # noqa: F401
    from sptune.spec import from_dict

    bc.load_data(from_dict(data), data_dir)


def _optim(job: Job, spec: Any, weight_decay: float) -> Any:
    # The trials' own builder, so precision/compile/warm-up/clipping match the sweep exactly.
    from sptune.rules.budgets import Budget
    from sptune.training.model_configs import optim_config

    return optim_config({"lr": job.lr, "batch_size": job.batch_size, "seed": job.seed}, spec,
                         Budget("epochs", job.epochs), weight_decay)


def _loop(job: Job, spt_state: dict | None) -> Any:
    from sptune.training.loops import FinetuneLoop, PretrainLoop, PretrainObjective
    from sptune.training.model_configs import classifier_config, encoder_config
    from sptune.training.variants import build_model

    spec, data = _WORKER["spec"], _WORKER["data"]
    if job.phase == "pretrain":
        p = spec.pretrain
        return PretrainLoop(encoder_config(spec.model, data.info), PretrainObjective(p.objective, p.mask_ratio, p.loss),
                            data.info, data.train, data.val, _optim(job, spec, p.weight_decay))
    import torch

    cfg = classifier_config(spec.model, data.info)
    torch.manual_seed(job.seed)  # as StudyTrainable does: the same initial weights as the sweep's trial
    model = build_model(spec.variant_kind(job.variant), cfg, spt_state)
    optim = _optim(job, spec, spec.finetune.weight_decay)
    return FinetuneLoop(cfg, data.info, data.train, data.val, optim, model=model)


def plain_trial(job: Job, spt_state: dict | None) -> dict[str, Any]:
    """What a hand-written sweep does per trial: train, validate each epoch, keep the best weights."""
    start = time.perf_counter()
    loop = _loop(job, spt_state)
    key, sign = ("val_loss", -1.0) if job.phase == "pretrain" else ("val_acc", 1.0)
    best, best_state = -float("inf"), None
    for _ in range(job.epochs):
        score = sign * loop.train_epoch()[key]
        if score > best:
            best, best_state = score, copy.deepcopy(loop.model.state_dict())
    return {"score": sign * best, "state": best_state, "seconds": time.perf_counter() - start}


def _run_stage(jobs: list[Job], spt_state: dict | None, pool: Any) -> list[dict[str, Any]]:
    if pool is None:
        return [plain_trial(j, spt_state) for j in jobs]
    return pool.starmap(plain_trial, [(j, spt_state) for j in jobs], chunksize=1)


def _test_accuracy(states: list[dict]) -> list[float]:
    """The single test read of each selected model, as the sweep's final evaluation does."""
    import torch

    from sptune.tasks import holdout
    from sptune.training.model_configs import classifier_config
    from sptune.training.models import Classifier
    from sptune.training.scoring import score

    spec, data = _WORKER["spec"], _WORKER["data"]
    accs = []
    with holdout.final_evaluation():
        test = data.test
        for state in states:
            model = Classifier(classifier_config(spec.model, data.info))
            model.load_state_dict(state)
            x, y = torch.from_numpy(test.x), torch.from_numpy(test.y).long()
            accs.append(score(model, data.info, x, y, torch.device("cpu"))[1])
    return accs


def run_plain(stages: list[list[Job]], pool: Any) -> dict[str, Any]:
    with bc.CpuSampler() as cpu:
        out = _plain_study(stages, pool)
    return {**out, "cpu_s": cpu.total()}


def _plain_study(stages: list[list[Job]], pool: Any) -> dict[str, Any]:
    """Phase by phase; within a phase, selection per variant, as the sweep does."""
    start = time.perf_counter()
    spt_state, trial_s, scores = None, [], {}
    tested: dict[str, list[dict]] = {"search": [], "rerun": []}
    for jobs in stages:
        results = _run_stage(jobs, spt_state, pool)
        trial_s += [r["seconds"] for r in results]
        phase = jobs[0].phase
        for variant in dict.fromkeys(j.variant for j in jobs):
            mine = [r for j, r in zip(jobs, results, strict=True) if j.variant == variant]
            best = (min if phase == "pretrain" else max)(mine, key=lambda r: r["score"])
            scores[f"{phase}-{variant}"] = best["score"]
            if phase == "pretrain":
                spt_state = best["state"]
            else:  # seed re-runs: every seed's validation-best model is tested
                tested[phase] += [r["state"] for r in mine] if phase == "rerun" else [best["state"]]
    # With seed re-runs the sweep tests each seed's model, not the search winners themselves.
    test_acc = _test_accuracy(tested["rerun"] or tested["search"])
    return {"wall_s": time.perf_counter() - start, "trial_seconds": trial_s, "selected_scores": scores,
            "test_acc": test_acc}


# ------------------------------------------------------------------ driver

def run_layout(name: str, epochs: int | None, data: dict[str, Any], args: argparse.Namespace,
               tmp: Path) -> dict[str, Any]:
    concurrent = LAYOUTS[name]
    sets = sweep_overrides(data, epochs, args.pretrain_trials, args.trials, concurrent)
    from sptune.spec import apply_override

    edited = copy.deepcopy(data)
    for s in sets:
        apply_override(edited, s)
    spec_path = bc.write_spec(edited, tmp / f"{name}-{epochs or 'spec'}")
    out = tmp / f"{name}-{epochs or 'spec'}" / "study"
    label = f"[{name}, {epochs or 'spec'} epochs per trial]"
    print(f"{label} sptune sweep: {concurrent} concurrent trial(s) x 1 thread ...", flush=True)
    warm_common_libraries(edited, args.data_dir)
    sptune = run_sptune(spec_path, args.data_dir, out)
    stages, in_trial = sweep_trials(out)
    print(f"[{name}] plain loops: same {sum(len(s) for s in stages)} trials, {concurrent} process(es) x 1 thread ...",
          flush=True)
    plain, pool_start = _plain_with_layout(stages, edited, args.data_dir, concurrent)
    return _summary(sptune, plain, stages, in_trial, pool_start, out, concurrent)


def _plain_with_layout(stages: list[list[Job]], data: dict[str, Any], data_dir: str | None,
                       concurrent: int) -> tuple[dict[str, Any], float]:
    init_worker(data, data_dir, 1)  # the driver also needs spec/data for the test evaluation
    if concurrent == 1:
        return run_plain(stages, None), 0.0
    start = time.perf_counter()
    # spawn: a forked child would inherit the parent's OpenMP pool state; workers load spec/data once.
    with mp.get_context("spawn").Pool(concurrent, initializer=init_worker, initargs=(data, data_dir, 1)) as pool:
        pool.map(int, range(concurrent))  # wait until every worker has finished its initializer
        pool_start = time.perf_counter() - start
        return run_plain(stages, pool), pool_start


def _summary(sptune: dict, plain: dict, stages: list[list[Job]], in_trial: dict[str, float], pool_start: float,
             out: Path, concurrent: int) -> dict[str, Any]:
    results = json.loads((out / "results.json").read_text())
    epochs = sum(j.epochs for s in stages for j in s)
    per_stage = {t["stage"]: {"wall_s": t["end"] - t["start"], "in_trial_s": in_trial.get(t["stage"], 0.0)}
                 for t in results["timeline"]}
    return {
        "sptune_wall_s": sptune["wall_s"], "plain_wall_s": plain["wall_s"],
        "overhead_fraction": (sptune["wall_s"] - plain["wall_s"]) / plain["wall_s"],
        # The same, with sptune's in-trial seconds replaced by the plain arm's training seconds: what
        # Ray Tune + MLflow add around the trials, without the VM's speed drift between the two arms
        # (+-5 % over minutes here; benchmarks/trial_overhead.py measures in-trial speed head to head).
        # With c concurrent trials the summed in-trial difference is spread over c slots: /c of it is wall.
        "overhead_outside_trials_fraction": (sptune["wall_s"] - (sum(in_trial.values()) - sum(plain["trial_seconds"]))
                                             / concurrent - plain["wall_s"]) / plain["wall_s"],
        "sptune_cpu_s": sptune["cpu_s"], "plain_cpu_s": plain["cpu_s"],
        "cpu_overhead_fraction": (sptune["cpu_s"] - plain["cpu_s"]) / plain["cpu_s"],
        "ray_start_s": sptune["ray_start_s"], "ray_shutdown_s": sptune["ray_shutdown_s"],
        "plain_pool_start_s": pool_start,
        "trials": sum(len(s) for s in stages), "trial_epochs": epochs,
        "sptune_in_trial_s_sum": sum(in_trial.values()), "plain_trial_s_sum": sum(plain["trial_seconds"]),
        "in_trial_ratio": sum(in_trial.values()) / sum(plain["trial_seconds"]),
        "sptune_stage_seconds": per_stage, "sptune_timeline": results["timeline"],
        "sptune_cpu_s_by_process": sptune["cpu_s_by_process"],
        "sptune_selected_val": {r["variant"]: r["val_acc"] for r in results["rows"]},
        "sptune_test_acc": {r["variant"]: r["test_acc"] for r in results["rows"]},
        "plain_selected_scores": plain["selected_scores"], "plain_test_acc": plain["test_acc"],
        "jobs": [asdict(j) for s in stages for j in s],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default=str(bc.SPECS / "digits_quick.yaml"))
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="extra spec overrides")
    ap.add_argument("--data-dir")
    ap.add_argument("--epochs", type=int, nargs="+", default=[4, 12],
                    help="epochs of every trial (pretrain and finetune); one sweep per value")
    ap.add_argument("--pretrain-trials", type=int, default=2)
    ap.add_argument("--trials", type=int, default=2, help="finetune trials per variant")
    ap.add_argument("--layouts", default="serial", help="comma list of: serial, parallel")
    ap.add_argument("--as-shipped", action="store_true",
                    help="the spec's own epochs, trial counts and scheduler (ASHA's early stops are replayed "
                         "epoch for epoch by the plain arm); slow: ~2 x the sweep's own time")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    bc.quiet_env()
    data = bc.spec_dict(args.spec, args.overrides)
    info = {"machine": bc.machine(), "spec": args.spec, "overrides": args.overrides, "epochs": args.epochs,
            "pretrain_trials": args.pretrain_trials, "finetune_trials_per_variant": args.trials}
    runs = {}
    with bc.temp_dir("sweep") as tmp:
        for epochs in [None] if args.as_shipped else args.epochs:
            for name in args.layouts.split(","):
                runs[f"{name}@{epochs or 'spec'}"] = run_layout(name, epochs, data, args, Path(tmp))
    headline = max(runs, key=lambda k: (k.startswith("serial"), runs[k]["trial_epochs"]))
    out = {**info, "overhead_fraction": runs[headline]["overhead_fraction"], "headline_run": headline,
           "overhead_outside_trials_fraction": runs[headline]["overhead_outside_trials_fraction"],
           "ray_start_s": runs[headline]["ray_start_s"], "runs": runs, "fixed_cost_fit": _fit(runs)}
    _print(runs, out["fixed_cost_fit"])
    bc.write_json(args.json, out)
    return 0


def _fit(runs: dict[str, dict]) -> dict[str, float] | None:
    """Overhead outside the trials (seconds) = fixed + per_epoch x trial-epochs, from the smallest and
    largest serial sweeps; in-trial speed drift between the arms is left out (see above)."""
    serial = sorted((r["trial_epochs"], r["overhead_outside_trials_fraction"] * r["plain_wall_s"])
                    for k, r in runs.items() if k.startswith("serial@"))
    if len(serial) < 2 or serial[0][0] == serial[-1][0]:
        return None
    (e1, o1), (e2, o2) = serial[0], serial[-1]
    per_epoch = (o2 - o1) / (e2 - e1)
    return {"fixed_s": o1 - per_epoch * e1, "per_trial_epoch_s": per_epoch}


def _print(runs: dict[str, dict], fit: dict[str, float] | None) -> None:
    rows = [(name, r["trials"], r["trial_epochs"], r["plain_wall_s"], r["sptune_wall_s"],
             f"{100 * r['overhead_fraction']:+.1f}%", f"{100 * r['overhead_outside_trials_fraction']:+.1f}%",
             f"{100 * r['cpu_overhead_fraction']:+.1f}%", r["in_trial_ratio"], r["ray_start_s"])
            for name, r in runs.items()]
    bc.print_table(["run", "trials", "epochs", "plain s", "sptune s", "overhead", "outside trials", "CPU-s overhead",
                    "in-trial x", "ray start s"], rows)
    for name, r in runs.items():
        cpu = ", ".join(f"{k}: {v:.1f}s" for k, v in r["sptune_cpu_s_by_process"].items())
        gaps = ", ".join(f"{k} {v['wall_s'] - v['in_trial_s']:.1f}s" for k, v in r["sptune_stage_seconds"].items())
        print(f"  {name} sptune CPU seconds by process: {cpu}\n  {name} Tuner wall outside trials: {gaps}")
    if fit:
        print(f"  overhead = {fit['fixed_s']:.1f}s fixed + {1000 * fit['per_trial_epoch_s']:.0f} ms per trial-epoch")


if __name__ == "__main__":
    sys.exit(main())
