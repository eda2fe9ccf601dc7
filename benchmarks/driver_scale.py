"""The driver at scale: N no-op trials x E reported epochs through sptune's real Tuner path.

Every arm is the study's own Tuner (`sptune.tuning.tuner.staged_search` + `build_study_tuner`) over a
plan (`sptune.plan.study_plan.build_plan`) whose variant searches are its stages: sptune's staged searcher
and stage scheduler (each stage its own searcher and scheduler), its CheckpointConfig, reused actors and
concurrency limit. Only the Trainable differs (the benchmark patches `study_trainable`): `NoOpTrainable`
reports E epochs of the metrics sptune's Trainable reports (`sptune/tuning/trainable.py`) and does no
work, so all that is measured is the driver: Tune's loop, the searcher/scheduler per result, checkpoint
bookkeeping, and, in the MLflow arms, the driver-side `sptune.tracking.mlflow_tracker.TrialRunLogger`
writing to a real MLflow store.

The same trials run once per arm, back to back in one process (ratios within one run):

  none       no MLflow callback (Tune + sptune's searcher/scheduler alone)
  sqlite     TrialRunLogger as shipped (batched writes) to a real SQLite store
  sqlite-1   TrialRunLogger writing every result at once (flush_results=1: the behaviour before batching)
  http       TrialRunLogger as shipped to a real `mlflow server` on 127.0.0.1 (SQLite behind it)
  http-1     the same server, one write per result
  none-keep1      the behaviour before sptune.tuning.callbacks.checkpoint_pruning: CheckpointConfig(num_to_keep=1),
                  so Tune snapshots the whole experiment (and SnapshotBundle zips it) after every trial checkpoint
  none-tuneloggers  the behaviour before sptune.tuning.callbacks.tune_files: Tune's three default loggers (JSON, CSV,
                  TensorBoardX) on every result (SPTUNE_TUNE_LOGGERS=all); sptune ships result.json only

Every arm has the study's checkpoint callbacks as `sptune.study.tuner_run` builds them: SnapshotBundle
(each Tune snapshot zipped whole under the storage) and CheckpointPruner (each trial keeps its best,
its latest and the checkpoint the last bundle names; Tune's num_to_keep=None), except `none-keep1`.

Measured per arm: driver results/s (results / wall time of `fit()`), the driver process's CPU
seconds per result (getrusage: all its threads), MLflow writes/s (calls the callback makes on
its MlflowClient, counted by a wrapper around that client, not by patching MLflow), and that
every epoch's metrics reached MLflow (a sample of runs is read back).

Concurrency: `--max-concurrent` (8) live trials, each asking for the machine's CPUs / 8, so together
they fill the node as a study's trials do: a new trial then waits for a finished trial's cached actor
instead of starting a worker process that Tune removes a moment later when that actor frees (what a
fractional `--cpu 0.01` did: ~30 worker processes for 40 trials). No-op trials answer at once, so 8
reused actors keep the driver's queue full; each is a ~150 MB Ray worker on a shared 2-core box.

    python benchmarks/driver_scale.py --json benchmarks/results/driver_scale.json
    python benchmarks/driver_scale.py --trials 50 --epochs 5 --arms none sqlite   # smoke, < 60 s
    python benchmarks/driver_scale.py --arms sqlite-1 --profile /tmp/driver.prof   # where the driver's time goes
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import resource
import shutil
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import bench_common as bc
from ray import tune

ARMS = ("none", "sqlite", "sqlite-1", "http", "http-1", "none-keep1", "none-tuneloggers")
TABLE_HEADERS = (
    "arm|trials|results|wall s|results/s|steady r/s|drv CPU ms/r|r/s per drv core|drv CPU/wall|ckpt/trial|"
    "MLflow writes|writes/s|writes/r|missing"
).split("|")
MLFLOW_WRITES = ("create_run", "log_batch", "log_metric", "log_param", "set_tag", "set_terminated", "update_run")


class NoOpTrainable(tune.Trainable):
    """Reports what sptune's StudyTrainable reports per finetuning epoch, without training anything."""

    def setup(self, config: dict) -> None:
        self._start(config)

    def reset_config(self, new_config: dict) -> bool:
        self._start(new_config)  # reuse the actor for the next trial, as sptune's Trainables do
        return True

    def _start(self, config: dict) -> None:
        # The Tuner's stop={"training_iteration": epochs} (sptune's build_study_tuner) ends each trial.
        self.epoch, self.lr = 0, float(config["lr"])

    def step(self) -> dict:
        self.epoch += 1
        e = self.epoch
        val_acc = 0.5 + 0.4 * (1 - 1 / (1 + e)) + 0.01 * (self.lr * 1e3 % 1)
        result = {
            "loss": 1.0 / e,
            "train_acc": val_acc + 0.02,
            "lr": self.lr,
            "grad_norm": 0.5,
            "epoch": e,
            "epoch_seconds": 0.001,
            "val_loss": 1.0 / e + 0.1,
            "val_acc": val_acc,
            "tokens_seen": 4096 * e,
            "diverged": 0,
            "best_val_acc": val_acc,
            "best_epoch": e,
            "checkpoint_rank": e,
        }
        if e == 1:  # once per trial, as sptune's StudyTrainable.step does when finetuning
            result["mlflow_params"] = {"optim.lr": self.lr, "optim.device_in_use": "cpu"}
            result.update(trainable_params=1000, total_params=1000)
        return result

    def save_checkpoint(self, checkpoint_dir: str) -> str:
        Path(checkpoint_dir, "state.txt").write_text(str(self.epoch))  # tiny: the driver's bookkeeping is measured
        return checkpoint_dir

    def load_checkpoint(self, checkpoint: str) -> None:
        self.epoch = int(Path(checkpoint, "state.txt").read_text())


class ResultCounter(tune.Callback):
    """How many results the driver handled, and when the first and last arrived."""

    def __init__(self) -> None:
        self.results, self.first, self.last = 0, None, None

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        self.results += 1
        self.last = time.perf_counter()
        self.first = self.first or self.last


class CountingClient:
    """Wraps the MlflowClient the callback writes with: counts its calls and the metrics it sends."""

    def __init__(self, client: Any) -> None:
        self._client, self.calls, self.metrics = client, Counter(), 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if not callable(attr):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            if name == "log_batch":
                self.metrics += len(kwargs.get("metrics") or [])
            return attr(*args, **kwargs)

        return counted

    def writes(self) -> int:
        return sum(n for name, n in self.calls.items() if name in MLFLOW_WRITES)


def bench_spec(args: argparse.Namespace) -> Any:
    """V scratch variants of trials/V trials each, E epochs, the chosen searcher and scheduler."""
    from sptune.spec import from_dict

    data = bc.only_variants(bc.spec_dict(args.spec), ["scratch"])
    search = {
        "lr": {"type": "loguniform", "low": 1e-4, "high": 1e-2},
        "batch_size": {"type": "choice", "values": [32, 64]},
    }
    names = ["scratch", *(f"scratch{i}" for i in range(2, args.variants + 1))]
    data["variants"] = {
        n: {"kind": "scratch", "num_samples": args.trials // args.variants, "search": search} for n in names
    }
    data["finetune"] = {**data.get("finetune", {}), "epochs": args.epochs}
    data["rerun_seeds"] = 1
    data["searcher"] = {"type": args.searcher}
    data["scheduler"] = (
        {"type": "fifo"}
        if args.scheduler == "fifo"
        else {"type": args.scheduler, "grace_period": 5, "reduction_factor": 2}
    )
    cpu = args.cpu if args.cpu is not None else (os.cpu_count() or 2) / args.max_concurrent
    data["resources"] = {"cpu": cpu, "gpu": 0, "max_concurrent": args.max_concurrent}
    return from_dict(data)


def mlflow_server(folder: Path) -> tuple[subprocess.Popen, str]:
    """A lean real MLflow server on a free loopback port (no job runner), SQLite behind it."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    cmd = [
        sys.executable,
        "-m",
        "mlflow",
        "server",
        "--backend-store-uri",
        f"sqlite:///{folder / 'server.db'}",
        "--artifacts-destination",
        str(folder / "artifacts"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
    ]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    uri = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return proc, uri
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError("mlflow server did not start within 120 s")


def tracking_callback(arm: str, uri: str, folder: Path, params: dict[str, dict]) -> tuple[Any, CountingClient]:
    from sptune.tracking.mlflow_tracker import Tracker, TrialRunLogger

    tracker = Tracker(uri, f"driver-scale-{arm}", folder)
    tracker.start_parent(f"driver-scale-{arm}", {"arm": arm})
    tracker.client = counting = CountingClient(tracker.client)
    batching = {"flush_results": 1} if arm.endswith("-1") else {}
    return TrialRunLogger(tracker, params, **batching), counting


def check_runs(client: Any, experiment_id: str, epochs: int, sample: int = 5) -> dict[str, Any]:
    """Every run finished, and a sample of runs holds every epoch of every per-epoch metric."""
    runs = client.search_runs([experiment_id], "tags.`sptune.trial_id` != ''", max_results=5000)
    missing = 0
    for run in runs[:sample]:
        for key in ("val_acc", "loss", "lr"):
            steps = {m.step for m in client.get_metric_history(run.info.run_id, key)}
            missing += len(set(range(1, epochs + 1)) - steps)
    return {
        "runs": len(runs),
        "finished": sum(r.info.status == "FINISHED" for r in runs),
        "sampled_runs": min(sample, len(runs)),
        "missing_epoch_values_in_sample": missing,
    }


def study_tuner(plan: Any, task: Any, storage: str, callbacks: list) -> Any:
    """The study's own Tuner of the plan's variant searches, each a stage, with NoOpTrainable as its trainable."""
    from unittest import mock

    import sptune.tuning.tuner
    from sptune.judging.stage_graph import Stage

    searcher, scheduler = sptune.tuning.tuner.staged_search(plan, [Stage(s) for s in plan.variant_searches()], {}, {})
    trainable = tune.with_resources(NoOpTrainable, {"cpu": plan.spec.resources.cpu, "gpu": 0})
    with mock.patch.object(sptune.tuning.tuner, "study_trainable", lambda plan, data: trainable):
        return sptune.tuning.tuner.build_study_tuner(plan, task, searcher, scheduler, storage, callbacks)


def run_arm(arm: str, plan: Any, task: Any, folder: Path, uri: str | None, profile: Path | None) -> dict[str, Any]:
    from sptune.tuning.callbacks.tune_files import chosen_tune_loggers
    from sptune.tuning.tuner import STUDY_EXPERIMENT

    searches = plan.variant_searches()
    n_trials, epochs = sum(s.n_trials for s in searches), max(s.epochs for s in searches)
    counter, callbacks, counting = ResultCounter(), [], None
    if uri is not None:
        params = {s.label: {"variant": s.variant, "max_epochs": s.epochs} for s in searches}
        logger, counting = tracking_callback(arm, uri, folder, params)
        callbacks.append(logger)
    loggers_for(arm)
    experiment_dir = folder / "ray_results" / STUDY_EXPERIMENT
    callbacks += checkpoint_callbacks(arm, str(experiment_dir))
    tuner = study_tuner(plan, task, str(folder / "ray_results"), [counter, *callbacks])
    print(f"[{arm}] {n_trials} trials x {epochs} epochs, {plan.concurrency} at once ...", flush=True)
    diagnostic(arm, tuner)
    profiler = cProfile.Profile() if profile else None
    cpu0, start = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    if profiler:
        profiler.enable()
    with chosen_tune_loggers():
        grid = tuner.fit()
    if profiler:
        profiler.disable()
    wall, cpu1 = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    out = arm_numbers(counter, wall, cpu, len(grid), sum(r.error is not None for r in grid))
    # Disk the arm's retention leaves: checkpoint folders per trial once the Tuner is done.
    kept = list(experiment_dir.glob("*/checkpoint_*"))
    out["checkpoints_per_trial"] = len(kept) / max(len(grid), 1)
    if counting is not None:
        out.update(
            writes=counting.writes(),
            write_calls=dict(counting.calls),
            metric_values=counting.metrics,
            writes_per_s=counting.writes() / wall,
            writes_per_result=counting.writes() / max(counter.results, 1),
        )
        out["check"] = check_runs(counting._client, logger.tracker.experiment_id, epochs)
    if profiler:
        out["profile_top"] = profile_top(profiler, profile, arm)
    return out


def loggers_for(arm: str) -> None:
    """Tune's three default loggers for the arm that measures them; result.json only (as shipped) for
    every other arm. Read when the Tuner is built (sptune.tuning.callbacks.tune_files.result_loggers)."""
    from sptune.tuning.callbacks.tune_files import LOGGERS_ENV

    os.environ.pop(LOGGERS_ENV, None)
    if arm == "none-tuneloggers":
        os.environ[LOGGERS_ENV] = "all"


def checkpoint_callbacks(arm: str, experiment_dir: str) -> list:
    """The study's SnapshotBundle and CheckpointPruner (`sptune.study.tuner_run`); the keep1 arm has the
    bundle only (its Tuner gets num_to_keep=1 in `diagnostic`)."""
    from sptune.study.snapshot import SnapshotBundle
    from sptune.tuning.callbacks.checkpoint_pruning import CheckpointPruner

    bundle = SnapshotBundle(experiment_dir)
    return [bundle] if arm == "none-keep1" else [bundle, CheckpointPruner(bundle)]


def diagnostic(arm: str, tuner: Any) -> None:
    """The keep1 arm's change to sptune's Tuner (Tune reads it when fit() starts): the CheckpointConfig
    before sptune.tuning.callbacks.checkpoint_pruning, and no pruner (the Tuner adds one when it has none)."""
    import dataclasses

    from sptune.tuning.callbacks.checkpoint_pruning import CheckpointPruner

    if arm == "none-keep1":  # Tune forces a snapshot every num_to_keep checkpoints of a trial
        internal = tuner._local_tuner  # no public setter once a Tuner is built
        keep_one = dataclasses.replace(internal._run_config.checkpoint_config, num_to_keep=1)
        callbacks = [c for c in internal._run_config.callbacks if not isinstance(c, CheckpointPruner)]
        internal._run_config = dataclasses.replace(
            internal._run_config, checkpoint_config=keep_one, callbacks=callbacks
        )


def arm_numbers(counter: ResultCounter, wall: float, cpu: float, trials: int, errors: int) -> dict[str, Any]:
    steady = (counter.last - counter.first) if counter.first and counter.last else float("nan")
    return {
        "trials": trials,
        "errored_trials": errors,
        "results": counter.results,
        "wall_s": wall,
        "results_per_s": counter.results / wall,
        "steady_results_per_s": (counter.results - 1) / steady,
        "driver_cpu_s": cpu,
        "driver_cpu_ms_per_result": 1000 * cpu / max(counter.results, 1),
        # What the driver would sustain on a core of its own: results per second of its CPU time.
        "results_per_driver_core_s": counter.results / cpu if cpu > 0 else float("nan"),
        "driver_cpu_fraction": cpu / wall,
    }


def profile_top(profiler: cProfile.Profile, path: Path, arm: str, n: int = 30) -> str:
    dest = path.with_name(f"{path.stem}-{arm}{path.suffix or '.prof'}")
    profiler.dump_stats(dest)
    buf = io.StringIO()
    pstats.Stats(profiler, stream=buf).sort_stats("cumulative").print_stats(n)
    print(buf.getvalue())
    print(f"profile written to {dest} (python -m pstats {dest})")
    return buf.getvalue()


def run_all(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    from sptune.plan.study_plan import build_plan

    spec = bench_spec(args)
    task = bc.load_data(spec, None)
    plan = build_plan(spec, task.info, cluster_cpus=2)
    server, arms = None, {}
    try:
        for arm in args.arms:
            folder = root / arm
            folder.mkdir()
            uri = None
            if arm.startswith("sqlite"):
                uri = f"sqlite:///{folder / 'mlflow.db'}"
            elif arm.startswith("http"):
                if server is None:
                    server = mlflow_server(root)
                uri = server[1]
            arms[arm] = run_arm(arm, plan, task, folder, uri, args.profile)
            shutil.rmtree(folder / "ray_results", ignore_errors=True)  # 1,000 trial dirs: free the disk early
    finally:
        if server is not None:
            server[0].terminate()
            server[0].wait(30)
    return {"concurrency": plan.concurrency, "arms": arms}


def summarize(arms: dict[str, dict[str, Any]], target: float) -> dict[str, Any]:
    base = arms.get("none")
    out: dict[str, Any] = {"target_results_per_s": target}
    for name, a in arms.items():
        # Wall results/s measures this machine (2 cores shared with the trial actors); per driver core,
        # the driver itself.
        out[f"{name}_meets_target_wall"] = a["results_per_s"] >= target
        out[f"{name}_meets_target_per_driver_core"] = a["results_per_driver_core_s"] >= target
        if base and name != "none":
            out[f"{name}_vs_none_results_per_s"] = a["results_per_s"] / base["results_per_s"]
            out[f"{name}_vs_none_cpu_per_result"] = a["driver_cpu_ms_per_result"] / base["driver_cpu_ms_per_result"]
    for batched, single in (("sqlite", "sqlite-1"), ("http", "http-1")):
        if batched in arms and single in arms:
            out[f"{batched}_batched_vs_per_result_speedup"] = (
                arms[batched]["results_per_s"] / arms[single]["results_per_s"]
            )
    # 1,000 trials each reporting once a minute: the share of one driver core at this CPU cost per result
    # (the target: < 10 %, i.e. <= 6 ms of driver CPU per result).
    for name, a in arms.items():
        out[f"{name}_core_share_1000_trials_1_per_min"] = 1000 / 60 * a["driver_cpu_ms_per_result"] / 1000
    return out


def print_report(out: dict[str, Any]) -> None:
    rows = []
    for name, a in out["arms"].items():
        rows.append(
            (
                name,
                a["trials"],
                a["results"],
                a["wall_s"],
                a["results_per_s"],
                a["steady_results_per_s"],
                a["driver_cpu_ms_per_result"],
                a["results_per_driver_core_s"],
                a["driver_cpu_fraction"],
                a.get("checkpoints_per_trial", "-"),
                a.get("writes", "-"),
                a.get("writes_per_s", "-"),
                a.get("writes_per_result", "-"),
                a.get("check", {}).get("missing_epoch_values_in_sample", "-"),
            )
        )
    bc.print_table(TABLE_HEADERS, rows)
    print()
    for key, value in out["summary"].items():
        print(f"{key}: {bc._fmt(value) if isinstance(value, float) else value}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default=str(bc.SPECS / "digits_quick.yaml"))
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--epochs", type=int, default=50)
    ap.add_argument("--variants", type=int, default=2)
    ap.add_argument("--cpu", type=float, default=None,
                    help="CPU per trial (default: the CPUs / --max-concurrent: trials fill the node, as a study does)")
    ap.add_argument("--max-concurrent", type=int, default=8)
    ap.add_argument("--searcher", default="random", choices=("random", "optuna"))
    ap.add_argument(
        "--scheduler",
        default="fifo",
        choices=("fifo", "sha", "asha"),
        help="fifo: every trial reports every epoch (trials x epochs results)",
    )
    ap.add_argument("--arms", nargs="+", default=["none", "sqlite", "sqlite-1"], choices=ARMS)
    ap.add_argument("--target", type=float, default=200.0, help="results/s the driver must sustain")
    ap.add_argument("--profile", type=Path, help="cProfile each arm's fit() into PATH-<arm>.prof")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    bc.quiet_env()
    info = {"machine": bc.machine(), "args": {k: str(v) for k, v in vars(args).items() if k != "json"}}
    bc.start_ray(2)
    try:
        with bc.temp_dir("driver") as tmp:
            out = run_all(args, Path(tmp))
    finally:
        bc.stop_ray()
    out = {**info, **out}
    out["summary"] = summarize(out["arms"], args.target)
    print_report(out)
    bc.write_json(args.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
