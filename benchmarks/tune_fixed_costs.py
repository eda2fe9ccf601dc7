"""Where a sweep's overhead comes from: fixed costs per Tuner vs costs per epoch, in one run.

  imports    a fresh Python process (what each new Tune actor is): seconds to import torch,
             ray.tune and sptune's trainables, and to build the first AdamW (which imports
             torch._dynamo), median of --repeats processes
  tuner      the study's own Tuner (one stage, MLflow TrialRunLogger, FIFO) running a single
             1-epoch digits trial: Tuner.fit wall minus the trial's own step() time = the fixed
             cost every Tuner pays (actor start, Tune setup/teardown, MLflow runs)
  per_step   Tune's cost per reported epoch with a no-op step: no checkpoint, a checkpoint per
             epoch (as sptune does), and a checkpoint plus an MLflow log_batch per epoch
  per_trial  Tune's cost per extra trial on a reused actor (1 no-op epoch each), alone and with
             sptune's MLflow TrialRunLogger (child run, params, metrics, status per trial)
  epoch      one digits finetune epoch with sptune.training.loops's loop (1 thread), for scale

From these it prints the fixed cost of a study with T Tuners and the training time a sweep needs
for the overhead to fall under 5 %.

    python benchmarks/tune_fixed_costs.py --json benchmarks/results/tune_fixed_costs.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import bench_common as bc
import torch
from ray import tune

IMPORT_PROBE = """
import json, time
t0 = time.perf_counter(); import torch
t1 = time.perf_counter(); import ray.tune
t2 = time.perf_counter(); import sptune.tuning.trainable
t3 = time.perf_counter(); torch.optim.AdamW(torch.nn.Linear(4, 4).parameters())
t4 = time.perf_counter()
print(json.dumps({"torch": t1 - t0, "ray.tune": t2 - t1, "sptune.tuning.trainable": t3 - t2, "first AdamW": t4 - t3}))
"""


def import_costs(repeats: int) -> dict[str, float]:
    runs = [json.loads(subprocess.run([sys.executable, "-c", IMPORT_PROBE], capture_output=True, text=True,
                                      check=True).stdout.strip().splitlines()[-1]) for _ in range(repeats)]
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def tuner_fixed_cost(repeats: int) -> list[dict[str, float]]:
    """A real sptune Tuner with one 1-epoch digits trial, repeated: fit wall vs in-trial time."""
    from sptune.judging.stage_graph import Stage
    from sptune.plan.study_plan import build_plan
    from sptune.spec import from_dict
    from sptune.tracking.mlflow_tracker import Tracker, TrialRunLogger
    from sptune.tuning.tuner import build_study_tuner, staged_search

    data = bc.spec_dict(bc.SPECS / "digits_quick.yaml")
    data.pop("pretrain", None)
    data["variants"] = {"scratch": {"num_samples": 1, "epochs": 1, "search": data["variants"]["scratch"]["search"]}}
    data.update(rerun_seeds=1, scheduler={"type": "fifo"}, resources={"cpu": 1, "gpu": 0, "max_concurrent": 1})
    data.pop("selection", None)  # the defaults: digits_quick picks among candidates one trial cannot offer
    spec = from_dict(data)
    task = bc.load_data(spec, None)
    plan = build_plan(spec, task.info, cluster_cpus=2)
    search = plan.variant_searches()[0]
    out = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as tmp:
            tracker = Tracker(f"sqlite:///{tmp}/mlflow.db", "fixed-costs", Path(tmp))
            tracker.start_parent("fixed-costs", {})
            logger = TrialRunLogger(tracker, {search.label: {}})
            searcher, scheduler = staged_search(plan, [Stage(search)], {}, {})
            tuner = build_study_tuner(plan, task, searcher, scheduler, tmp, [logger])
            start = time.perf_counter()
            grid = tuner.fit()
            wall = time.perf_counter() - start
            in_trial = float(grid[0].metrics["time_total_s"])
            out.append({"fit_wall_s": wall, "in_trial_s": in_trial, "fixed_s": wall - in_trial})
    return out


class NoOp(tune.Trainable):
    """A trial whose epoch costs nothing: what is left is Tune's own cost per result."""

    def setup(self, config: dict) -> None:
        self.model = torch.nn.Linear(64, 64)

    def step(self) -> dict:
        return {"t": time.time(), "val_acc": 0.01 * self.iteration}

    def save_checkpoint(self, checkpoint_dir: str) -> str:
        torch.save(self.model.state_dict(), Path(checkpoint_dir) / "state.pt")
        return checkpoint_dir

    def load_checkpoint(self, checkpoint: str) -> None:
        pass

    def reset_config(self, new_config: dict) -> bool:
        return True  # let Tune reuse the actor, as sptune's trainables do


class MlflowEpochLogger(tune.Callback):
    """The write sptune's TrialRunLogger makes per epoch: one log_batch of ~8 metrics to SQLite."""

    def __init__(self, uri: str) -> None:
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(uri)
        self.run_id = self.client.create_run(self.client.create_experiment("steps")).info.run_id

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(f"m{i}", 1.0, now, result["training_iteration"]) for i in range(8)]
        self.client.log_batch(self.run_id, metrics=metrics)


def per_step_costs(steps: int) -> dict[str, float]:
    results = {}
    for label, checkpoint, mlflow in (("no checkpoint", False, False), ("checkpoint", True, False),
                                      ("checkpoint + MLflow", True, True)):
        with tempfile.TemporaryDirectory() as tmp:
            callbacks = [MlflowEpochLogger(f"sqlite:///{tmp}/m.db")] if mlflow else []
            keep = tune.CheckpointConfig(num_to_keep=1, checkpoint_score_attribute="val_acc",
                                         checkpoint_score_order="max", checkpoint_frequency=1 if checkpoint else 0)
            tune.Tuner(
                tune.with_resources(NoOp, {"cpu": 1}),
                tune_config=tune.TuneConfig(metric="val_acc", mode="max", num_samples=1),
                run_config=tune.RunConfig(storage_path=tmp, stop={"training_iteration": steps}, callbacks=callbacks,
                                          verbose=0, checkpoint_config=keep),
            ).fit()
            rows = [json.loads(line) for line in open(next(Path(tmp).rglob("result.json")))]
            gaps = [b["t"] - a["t"] for a, b in zip(rows, rows[1:], strict=False)]
            results[label] = statistics.median(gaps)
    return results


def per_trial_costs(trials: int) -> dict[str, float]:
    """Seconds per extra trial (1 epoch, no checkpoint, one reused actor): Tune alone, and with
    sptune's own MLflow logger (a child run with its params per trial, metrics, status)."""
    from sptune.tracking.mlflow_tracker import Tracker, TrialRunLogger

    def fit(n: int, mlflow: bool) -> float:
        with tempfile.TemporaryDirectory() as tmp:
            callbacks = []
            if mlflow:
                tracker = Tracker(f"sqlite:///{tmp}/mlflow.db", "trials", Path(tmp))
                tracker.start_parent("trials", {})
                callbacks = [TrialRunLogger(tracker, {"scratch": {f"model.p{i}": i for i in range(12)}})]
            lrs = tune.grid_search([1e-3 * (i + 1) for i in range(n)])
            space = {"phase": "search", "variant": "scratch", "lr": lrs}
            tuner = tune.Tuner(
                tune.with_resources(NoOp, {"cpu": 1}), param_space=space,
                tune_config=tune.TuneConfig(metric="val_acc", mode="max", max_concurrent_trials=1, reuse_actors=True),
                run_config=tune.RunConfig(storage_path=tmp, stop={"training_iteration": 1}, callbacks=callbacks,
                                          verbose=0))
            start = time.perf_counter()
            tuner.fit()
            return time.perf_counter() - start

    out = {}
    for label, mlflow in (("Tune", False), ("Tune + sptune MLflow logger", True)):
        one, many = fit(1, mlflow), fit(trials, mlflow)
        out[label] = (many - one) / (trials - 1)
    return out


def digits_epoch_seconds() -> float:
    import torch

    from sptune.spec import from_dict
    from sptune.training.loops import FinetuneLoop, OptimConfig
    from sptune.training.model_configs import classifier_config

    torch.set_num_threads(1)
    spec = from_dict(bc.spec_dict(bc.SPECS / "digits_quick.yaml"))
    task = bc.load_data(spec, None)
    loop = FinetuneLoop(classifier_config(spec.model, task.info), task.info, task.train, task.val,
                        OptimConfig(lr=1e-3, batch_size=32, epochs=3, seed=0))
    loop.train_epoch()  # warm-up
    start = time.perf_counter()
    loop.train_epoch()
    return time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--trials", type=int, default=16, help="trials in the per-trial measurement")
    ap.add_argument("--tuners", type=int, default=3, help="Tuners in the study the summary is for")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    bc.quiet_env()
    info = {"machine": bc.machine(), "args": {k: v for k, v in vars(args).items() if k != "json"}}
    imports = import_costs(args.repeats)
    epoch = digits_epoch_seconds()
    bc.start_ray(2)
    try:
        tuners = tuner_fixed_cost(args.repeats)
        steps = per_step_costs(args.steps)
        per_trial = per_trial_costs(args.trials)
    finally:
        bc.stop_ray()
    fixed = statistics.median(t["fixed_s"] for t in tuners[1:] or tuners)  # the first also warms Ray up
    per_epoch = steps["checkpoint + MLflow"]
    study_fixed = args.tuners * fixed
    # overhead = (study_fixed + n * per_epoch) / (n * epoch) <= 5 %  =>  n * (0.05 * epoch - per_epoch) >= study_fixed
    margin = 0.05 * epoch - per_epoch
    break_even = study_fixed / margin * epoch if margin > 0 else float("inf")
    out = {**info, "imports_s": imports, "actor_start_imports_s": sum(imports.values()), "tuner_runs": tuners,
           "tuner_fixed_s": fixed, "per_step_s": steps, "per_trial_s": per_trial, "digits_epoch_s": epoch,
           "per_epoch_overhead_fraction": per_epoch / epoch, "study_fixed_s": study_fixed,
           "training_s_for_5pct": break_even}
    bc.print_table(["fresh process", "seconds"], list(imports.items()) + [("total", sum(imports.values()))])
    bc.print_table(["Tuner (1 trial x 1 digits epoch)", "fit s", "in-trial s", "fixed s"],
                   [(f"run {i + 1}", t["fit_wall_s"], t["in_trial_s"], t["fixed_s"]) for i, t in enumerate(tuners)])
    bc.print_table(["per reported epoch", "ms"], [(k, 1000 * v) for k, v in steps.items()])
    bc.print_table(["per extra trial (reused actor)", "ms"], [(k, 1000 * v) for k, v in per_trial.items()])
    print(f"digits epoch {epoch:.3f}s: per-epoch overhead {100 * per_epoch / epoch:.2f} %; fixed cost per Tuner "
          f"{fixed:.2f}s, {args.tuners} Tuners {study_fixed:.1f}s -> overhead <= 5 % once a sweep trains "
          f">= {break_even:.0f}s")
    bc.write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
