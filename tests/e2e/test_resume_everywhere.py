"""A study interrupted at every step, resumed each time, ends as the uninterrupted one: the same trials trained to
the same epochs, the same picks and candidates, the same per-seed test accuracies, no duplicate MLflow run.

One tiny SPT study on digits with synchronous halving (η 3: its search's 3 trials → 1 at the rung at epoch 1), an LR
extension round that always adds trials (a range whose every LR is within 1.5x of a bound), seed-robust candidates
(top 2) and 2 re-runs. Each case interrupts one run of it six times in a row, once inside each step, resuming in
between: inside pretraining, the search just after its rung's decision, the LR extension, the candidates, the
re-runs, and between the test read and MLflow. SIGINT goes to the driver running in this process (Tune's graceful
stop; exit 130); kill -9 to a driver run as a subprocess on this session's Ray (nothing is written at the end), each
started while the run before it trains and handed its arguments when its turn comes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ray import cloudpickle

import sptune.study.study
import sptune.tuning.tuner
from sptune.sweep import main
from sptune.tuning.trainable import StudyTrainable
from tests.helpers_tiny import child_runs, trial_checkpointed

SPEC = """
name: resume_everywhere
seed: 0
task: {name: digits}
model: {d_model: 32, n_layers: 1, n_heads: 4, d_ff: 64}
rerun_seeds: 2
selection: {top_k: 2, seeds: 1}
lr_extend: {max_rounds: 1}
pretrain:
  objective: masked
  mask_ratio: 0.5
  loss: l2
  epochs: 2
  num_samples: 1
  search:
    lr: {type: loguniform, low: 1.0e-3, high: 2.0e-3}
    batch_size: {type: choice, values: [64]}
finetune: {epochs: 3}
variants:
  spt:
    num_samples: 3
    search:
      lr: {type: loguniform, low: 1.0e-3, high: 2.0e-3, extend: true}
      batch_size: {type: choice, values: [64]}
scheduler: {type: sha, grace_period: 1, reduction_factor: 3}
searcher: {type: optuna}
"""
REPO = Path(__file__).resolve().parents[2]
SEARCH_TRIALS, RUNG = 3, 1
# Each epoch of the interrupted runs sleeps this long first, so every point stays reachable for more than a snapshot
# period (1 s below): at this model's size an epoch alone takes a fraction of a second, and a point whose window
# closed before the watcher saw it was missed (seen in CI). Sleeping changes no number a trial reports.
SLOW_EPOCH_S = 0.6


class SlowEpochs(StudyTrainable):
    def step(self) -> dict:
        time.sleep(SLOW_EPOCH_S)
        return super().step()


def slow_log_test_metrics(*args: Any) -> None:
    """The test numbers' logging, late by one epoch's sleep: the window between the test read and MLflow is
    otherwise a few milliseconds, shorter than the watcher's poll (missed once in CI)."""
    time.sleep(SLOW_EPOCH_S)
    LOG_TEST_METRICS(*args)


LOG_TEST_METRICS = sptune.study.study.log_test_metrics


def slow_main(argv: list[str]) -> int:
    """The sweep's CLI with the study's trainable swapped for `SlowEpochs` (Ray ships it to its workers by value:
    this module is not importable there) and the test numbers' logging late."""
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    trainable, sptune.tuning.tuner.StudyTrainable = sptune.tuning.tuner.StudyTrainable, SlowEpochs
    sptune.study.study.log_test_metrics = slow_log_test_metrics
    try:
        return main(argv)
    finally:
        sptune.tuning.tuner.StudyTrainable = trainable
        sptune.study.study.log_test_metrics = LOG_TEST_METRICS


def _state(out: Path) -> dict[str, Any]:
    try:
        return json.loads((out / "study_state.json").read_text() or "{}")
    except (FileNotFoundError, json.JSONDecodeError):  # written atomically, but read while it is replaced
        return {}


def _running(stage: str, marker: str) -> Callable[[Path], bool]:
    """A trial of `stage` (its params.json holds `marker`) has saved a checkpoint, and the stage is not selected."""
    return lambda out: trial_checkpointed(out, marker) and not any(
        label.startswith(stage) for label in _state(out).get("searches", {})
    )


def _rung_decided(out: Path) -> bool:
    """Every search trial has reported the rung's epoch: halving decided the rung in that same result."""
    reached = 0
    for params in (out / "ray_results" / "study").glob("*/params.json"):
        result = params.parent / "result.json"
        if '"search-spt"' in params.read_text() and result.exists():
            lines = [line for line in result.read_text().splitlines() if line.strip()]
            reached += any(json.loads(line)["training_iteration"] == RUNG for line in lines)
    return reached >= SEARCH_TRIALS and "search-spt" not in _state(out).get("searches", {})


def _tested_not_published(out: Path) -> bool:
    """The test numbers are saved (right after the test split was read), MLflow and the results files not yet."""
    state = _state(out)
    return state.get("rows") is not None and not state.get("published")


def _pretraining(out: Path) -> bool:
    """A pretraining epoch is checkpointed and the pretraining not selected. Only pretraining trials run before its
    selection (the one variant starts from it), so any checkpoint will do: a trial's params.json reaches the storage
    only with the driver's next snapshot, which a fast pretraining trial could finish before (seen once in CI)."""
    trained = any((out / "ray_results" / "study").glob("*/checkpoint_*"))
    return trained and not any(label.startswith("pretrain") for label in _state(out).get("searches", {}))


# In the order a study reaches them.
POINTS = {
    "pretraining": _pretraining,
    "search after its rung's decision": _rung_decided,
    "LR extension": _running("extend-", '"extend-'),
    "candidates": _running("candidates-", '"candidates-'),
    "re-runs": _running("rerun-", '"rerun-'),
    "between the test read and MLflow": _tested_not_published,
}


def _when(ready: Callable[[], bool], act: Callable[[], None], running: Callable[[], bool]) -> threading.Event:
    """A watcher thread: `act()` once `ready()` holds (asked every 50 ms) while `running()`."""
    fired = threading.Event()

    def watch() -> None:
        while running():
            if ready():
                fired.set()  # first: a killed driver's wait() returns at once, maybe before this thread runs on
                act()
                return
            time.sleep(0.05)

    threading.Thread(target=watch, daemon=True).start()
    return fired


def _sigint_at(point: str, argv: list[str], out: Path) -> None:
    """Run the study in this process and SIGINT it at `point`: it must end with 130 and its paragraph."""
    done = threading.Event()
    fired = _when(lambda: POINTS[point](out), lambda: os.kill(os.getpid(), signal.SIGINT), lambda: not done.is_set())
    before = signal.signal(signal.SIGINT, lambda *_: None)  # a SIGINT sent just as the study ended: ignored here
    try:
        code = slow_main(argv)
    finally:
        done.set()
        time.sleep(0.2)
        signal.signal(signal.SIGINT, before)
    assert fired.is_set(), f"the study ended (exit {code}) before {point}"
    assert code == 130, f"SIGINT at {point}: exit {code}"


# A kill -9 driver that has done its imports (Ray, torch, MLflow, sptune: seconds on a busy machine) and waits for
# its arguments on stdin. Each is started while the run before it trains, so those seconds overlap that run
# instead of adding to each of the six.
_WAITING_DRIVER = (f"import json, sys; from {__name__} import slow_main; "
                   "sys.exit(slow_main(json.loads(sys.stdin.readline())))")


class Drivers:
    """The kill -9 case's driver processes, each started one run ahead of its run."""

    def __init__(self, runs: int) -> None:
        self.left, self.waiting = runs, self._start()

    @staticmethod
    def _start() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c", _WAITING_DRIVER], cwd=REPO, stdin=subprocess.PIPE, text=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def take(self) -> subprocess.Popen:
        proc, self.left = self.waiting, self.left - 1
        self.waiting = self._start() if self.left else None
        return proc

    def close(self) -> None:
        if self.waiting is not None:
            self.waiting.kill()
            self.waiting.wait()


def _kill_at(point: str, argv: list[str], out: Path, address: str, proc: subprocess.Popen) -> None:
    """Run the study in the waiting driver `proc`, on this session's Ray, and kill -9 it at `point`."""
    assert proc.poll() is None, f"the waiting driver exited ({proc.returncode}) before it was given the study"
    proc.stdin.write(json.dumps([*argv, "--address", address]) + "\n")
    proc.stdin.close()
    fired = _when(lambda: POINTS[point](out), lambda: proc.send_signal(signal.SIGKILL), lambda: proc.poll() is None)
    code = proc.wait(timeout=400)
    assert fired.is_set(), f"the study ended (exit {code}) before {point}"


# A trial's folder: its class, a run's id, its index, then its config cut to a length that depends on the class name.
_TRIAL = re.compile(r"(?:StudyTrainable|SlowEpochs)_[0-9a-f]{8}_(\d+)_[^/]*")
_STAMP = re.compile(r"_\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d")
VOLATILE = {"mlflow", "timeline", "provenance", "trial_id", "mlflow_run_id", "trial_seconds", "trial_seconds_source"}


def _comparable(value: Any, out: Path) -> Any:
    """results.json less what differs between any two runs: timings, run and trial ids, paths' own folders."""
    if isinstance(value, dict):
        return {_comparable(k, out): _comparable(v, out) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_comparable(v, out) for v in value]
    if isinstance(value, str):
        return _STAMP.sub("", _TRIAL.sub(r"trial_\1", value.replace(str(out), "OUT")))
    return value


def _trained(out: Path) -> dict[tuple, int]:
    """Every trial's config and the last epoch it trained (an epoch trained again after a kill counts once)."""
    found = {}
    for params in (out / "ray_results" / "study").glob("*/params.json"):
        p, result = json.loads(params.read_text()), params.parent / "result.json"
        text = result.read_text() if result.exists() else ""
        lines = [json.loads(line) for line in text.splitlines() if line.strip()]
        key = (p["stage"], round(p["lr"], 10), p.get("seed"), p.get("candidate"))
        found[key] = max((line["training_iteration"] for line in lines), default=0)
    return found


@pytest.fixture(scope="module")
def spec(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("resume_everywhere") / "resume_everywhere.yaml"
    path.write_text(SPEC)
    return path


# The uninterrupted study, run with a Ray of its own (argv[1] CPUs: the shared session's) while the interrupted runs
# sleep through their epochs on the shared one.
OWN_RAY = ("import sys, ray; ray.init(num_cpus=int(sys.argv.pop(1)), include_dashboard=False, log_to_driver=False); "
           "from sptune.sweep import main; sys.exit(main(sys.argv[1:]))")


class Uninterrupted:
    """The study run once without interruption, in a subprocess that trains beside the first case's interrupted
    runs; `out()` waits for it to finish and returns its output directory."""

    def __init__(self, spec: Path, cpus: int) -> None:
        self.dir, self.log = spec.parent / "uninterrupted", spec.parent / "uninterrupted.log"
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        env["PYTHONPATH"] = str(REPO)
        cmd = [sys.executable, "-c", OWN_RAY, str(cpus), str(spec), "--output", str(self.dir)]
        with open(self.log, "w") as log:  # the child keeps its own copy open
            self.proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def out(self) -> Path:
        code = self.proc.wait(timeout=600)
        assert code == 0, self.log.read_text()[-3000:]
        return self.dir

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


@pytest.fixture(scope="module")
def uninterrupted(ray_session, spec) -> Uninterrupted:
    run = Uninterrupted(spec, int(ray_session.cluster_resources()["CPU"]))
    yield run
    run.stop()


# kill -9 at every step is heavy: test_resume, test_resume_selection_steps and test_study_promises kill drivers
# mid-search, mid-candidates and inside the test read.
@pytest.mark.parametrize("how", ["SIGINT", pytest.param("kill -9", marks=pytest.mark.heavy)])
def test_a_study_interrupted_at_every_step_ends_as_the_uninterrupted_one(
    ray_session, spec, uninterrupted, how, monkeypatch
):
    # The points are read from the trial folders Tune copies to the storage with each snapshot: every second here.
    monkeypatch.setenv("TUNE_GLOBAL_CHECKPOINT_S", "1")
    out = spec.parent / how.replace(" ", "")
    argv = [str(spec), "--output", str(out)]
    address = ray_session.get_runtime_context().gcs_address
    drivers = Drivers(len(POINTS)) if how == "kill -9" else None
    try:
        for n, point in enumerate(POINTS):
            step = argv + (["--resume"] if n else [])
            _sigint_at(point, step, out) if drivers is None else _kill_at(point, step, out, address, drivers.take())
    finally:
        if drivers is not None:
            drivers.close()
    assert main([*argv, "--resume"]) == 0
    reference = uninterrupted.out()

    assert _trained(out) == _trained(reference)  # the same trials, each trained to the same epoch
    done, ran = (json.loads((o / "results.json").read_text()) for o in (out, reference))
    assert _comparable(done, out) == _comparable(ran, reference)  # picks, candidates, per-seed test accuracies
    runs = child_runs(out)
    finished = [r for r in runs if r.info.status == "FINISHED"]
    assert len(finished) == len(child_runs(reference)) == len(_trained(out))
    assert len({r.data.tags["sptune.trial_id"] for r in runs}) == len(runs)  # no trial has two runs
    assert len((out / "test_reads.jsonl").read_text().splitlines()) == len(done["rows"])  # the test split read once
