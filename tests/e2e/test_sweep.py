"""A whole digits study through real Ray Tune and a real MLflow SQLite store.

One small sweep, shared by the assertions below: parent/child runs, one Tuner for the whole
study (pretraining and every variant, each its own search), validation-based selection of trial
and epoch, test_acc only on selected runs, and the test split read exactly once per selected
checkpoint, after all Tuners.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from sptune.spec import load_spec
from sptune.study.final_evaluation import train_sample
from sptune.sweep import main
from sptune.tasks import TaskRequest, load_task
from sptune.training.final_scores import accuracy_on
from tests.helpers_browser import headless
from tests.helpers_tiny import PLAIN

TINY = [
    "--set", "pretrain.epochs=3", "--set", "pretrain.num_samples=2",
    "--set", "finetune.epochs=4", "--set", "variants.scratch.num_samples=3", "--set", "variants.spt.num_samples=3",
    "--set", "scheduler.grace_period=1", "--set", "model.n_layers=1", "--set", "rerun_seeds=1",
    "--set", "variants.spt.epochs=3",  # variants sharing a Tuner keep their own epoch budgets
    *PLAIN,  # the counts below are a plain study's
]


SECRET = "sptune-test-secret-7f3a"


@pytest.fixture(scope="module")
def study(ray_session, repo_root, tmp_path_factory):
    out = tmp_path_factory.mktemp("study") / "digits"
    # A credential in the environment must never reach MLflow (checked below).
    os.environ["AWS_SECRET_ACCESS_KEY"] = SECRET
    try:
        code = main([str(Path(repo_root) / "search_spaces" / "digits_quick.yaml"), "--output", str(out), *TINY])
    finally:
        del os.environ["AWS_SECRET_ACCESS_KEY"]
    assert code == 0
    results = json.loads((out / "results.json").read_text())
    client = MlflowClient(tracking_uri=results["mlflow"]["tracking_uri"])
    runs = client.search_runs([results["mlflow"]["experiment_id"]], max_results=1000)
    return out, results, client, runs


def _children(runs, parent_id):
    return [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent_id]


def test_outputs_live_in_the_output_directory(study):
    out, results, _, _ = study
    for name in ("results.json", "results.md", "mlflow.db", "spec.yaml", "test_reads.jsonl"):
        assert (out / name).exists(), name
    assert results["mlflow"]["tracking_uri"] == f"sqlite:///{(out / 'mlflow.db').resolve()}"
    assert (out / "mlartifacts").is_dir()


def test_each_trial_folder_has_tunes_result_json_and_no_csv_or_tensorboard_copy(study):
    """sptune.tuning.callbacks.tune_files: MLflow is the record; Tune's CSV and TensorBoard files per result cost the
    driver time at scale and nobody reads them (SPTUNE_TUNE_LOGGERS=all gives them back)."""
    out, _, _, _ = study
    trials = [d for d in (out / "ray_results" / "study").glob("StudyTrainable*") if d.is_dir()]
    assert trials
    for trial in trials:
        assert (trial / "result.json").stat().st_size > 0, trial
        assert not (trial / "progress.csv").exists(), trial
        assert not list(trial.glob("events.out.tfevents*")), trial


def test_trials_keep_only_the_checkpoints_they_need_and_every_selected_one_exists(study):
    """sptune.tuning.callbacks.checkpoint_pruning: each trial keeps its best and latest checkpoint (and at most one
    more, the one the last snapshot named), not one per epoch; whatever the study selected is still there."""
    out, _, _, _ = study
    trials = [d for d in (out / "ray_results" / "study").glob("StudyTrainable*") if d.is_dir()]
    kept = {t.name: len(list(t.glob("checkpoint_*"))) for t in trials}
    assert kept and all(1 <= n <= 3 for n in kept.values()), kept
    state = json.loads((out / "study_state.json").read_text())
    selected = [p["selection"]["checkpoint_path"] for s in state["searches"].values() for p in s["selected"]]
    assert selected
    for path in selected:
        assert (Path(path) / "state.pt").is_file(), path


def test_one_parent_and_a_child_per_trial(study):
    _, results, _, runs = study
    parent_id = results["mlflow"]["parent_run_id"]
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert [p.info.run_id for p in parents] == [parent_id]
    children = _children(runs, parent_id)
    assert len(children) == 2 + 3 + 3  # pretrain + scratch + spt trials
    phases = sorted((c.data.tags["sptune.phase"], c.data.tags["sptune.variant"]) for c in children)
    assert phases.count(("pretrain", "masked")) == 2 and phases.count(("search", "scratch")) == 3
    for child in children:
        params = child.data.params
        for key in ("lr", "batch_size", "seed", "variant", "phase", "model.d_model", "model.n_layers"):
            assert key in params, key
        assert child.info.status == "FINISHED"


def test_one_tuner_for_the_whole_study_each_search_with_its_own_budget(study):
    out, _, _, runs = study
    tuners = sorted(p.name for p in (out / "ray_results").iterdir() if p.is_dir())
    assert tuners == ["study"]
    by_stage: dict[str, list[dict]] = {}
    epochs: dict[str, list[int]] = {}
    for result in (out / "ray_results" / "study").glob("*/result.json"):
        lines = [json.loads(line) for line in result.read_text().splitlines()]
        by_stage.setdefault(lines[0]["config"]["stage"], []).append({**lines[0], "end": lines[-1]["timestamp"]})
        epochs.setdefault(lines[0]["config"]["stage"], []).append(lines[-1]["training_iteration"])
    # Each variant's own epoch budget (halving never stops the first trial to reach a rung).
    assert max(epochs["search-scratch"]) == 4 and max(epochs["search-spt"]) == 3 and max(epochs["pretrain"]) == 3
    # Each search got exactly its own trial budget from its own searcher ...
    assert {v: len(r) for v, r in by_stage.items()} == {"pretrain": 2, "search-scratch": 3, "search-spt": 3}
    # ... and the Tuner's reused actors (2 concurrent slots) trained pretraining and finetuning trials alike.
    assert len({r["pid"] for rs in by_stage.values() for r in rs}) <= 2
    # The SPT variant's trials start only once pretraining is selected, from the selected checkpoint.
    state = json.loads((out / "study_state.json").read_text())
    selected_spt = state["searches"]["pretrain"]["selected"][0]["selection"]["checkpoint_path"]
    pretrain_done = max(r["end"] for r in by_stage["pretrain"])
    for first in by_stage["search-spt"]:
        assert first["config"]["spt_checkpoint"] == selected_spt
        assert first["timestamp"] - first["time_this_iter_s"] >= pretrain_done - 1  # timestamps are whole seconds
    assert all("spt_checkpoint" not in r["config"] for r in by_stage["search-scratch"])
    timeline = json.loads((out / "results.json").read_text())["timeline"]
    assert sorted(t["stage"] for t in timeline) == ["pretrain", "search-scratch", "search-spt"]


def test_per_epoch_metrics_and_best_summary_are_logged(study):
    _, results, client, runs = study
    searched = [r for r in _children(runs, results["mlflow"]["parent_run_id"])
                if r.data.tags["sptune.phase"] == "search"]
    for run in searched:
        history = client.get_metric_history(run.info.run_id, "val_acc")
        assert [m.step for m in history] == list(range(1, len(history) + 1))
        assert run.data.metrics["best_val_acc"] == pytest.approx(max(m.value for m in history))
        best_epoch = int(run.data.metrics["best_epoch"])
        assert history[best_epoch - 1].value == pytest.approx(run.data.metrics["best_val_acc"])


def test_selection_is_the_validation_best_trial_and_epoch(study):
    _, results, client, runs = study
    searched = [r for r in _children(runs, results["mlflow"]["parent_run_id"])
                if r.data.tags["sptune.phase"] == "search"]
    for row in results["rows"]:
        mine = [r for r in searched if r.data.tags["sptune.variant"] == row["variant"]]
        best = max(max(m.value for m in client.get_metric_history(r.info.run_id, "val_acc")) for r in mine)
        assert row["val_acc"] == pytest.approx(best)
        selected = client.get_run(row["mlflow_run_id"])
        history = client.get_metric_history(row["mlflow_run_id"], "val_acc")
        assert history[row["best_epoch"] - 1].value == pytest.approx(row["val_acc"])
        assert float(selected.data.params["lr"]) == pytest.approx(row["lr"])
        assert selected.data.tags.get("sptune.selected") == "true"


def test_test_acc_only_on_selected_runs(study):
    _, results, client, runs = study
    selected = {row["mlflow_run_id"] for row in results["rows"]}
    for run in _children(runs, results["mlflow"]["parent_run_id"]):
        fresh = client.get_run(run.info.run_id)
        assert ("test_acc" in fresh.data.metrics) == (run.info.run_id in selected)
        if run.info.run_id in selected:
            artifacts = [a.path for a in client.list_artifacts(run.info.run_id, "selected_checkpoint")]
            assert artifacts == ["selected_checkpoint/state.pt"]


def test_results_contract(study):
    out, results, _, _ = study
    assert [r["variant"] for r in results["rows"]] == ["scratch", "spt"]
    for row in results["rows"]:
        for key in ("variant", "task", "lr", "batch_size", "best_epoch", "val_acc", "test_acc", "mlflow_run_id"):
            assert row[key] is not None, key
        assert 0.0 <= row["test_acc"] <= 1.0 and row["task"] == "digits"
    scratch, spt = results["rows"]
    assert results["baseline"] == "scratch" and scratch["delta_test_vs_baseline"] is None
    assert spt["delta_test_vs_baseline"] == pytest.approx(spt["test_acc"] - scratch["test_acc"])
    assert "| spt |" in (out / "results.md").read_text()


def test_test_split_read_once_per_selected_checkpoint_after_all_tuners(study):
    """Fails if anything reads the test split before the final evaluation."""
    out, results, _, _ = study
    reads = [json.loads(line) for line in (out / "test_reads.jsonl").read_text().splitlines()]
    assert len(reads) == len(results["rows"]) == 2
    last_tuner_end = max(tuner["end"] for tuner in results["timeline"])
    assert all(read["time"] >= last_tuner_end for read in reads)
    assert all(read["rows"] == 359 for read in reads)  # digits test split: 20 % of 1,797


def test_results_carry_provenance_test_reads_expected_max_and_seeds_used(study):
    out, results, _, runs = study
    provenance, rows = results["provenance"], results["rows"]
    assert len(provenance["git"]["commit"]) == 40 and isinstance(provenance["git"]["dirty"], bool)
    assert {"python", "torch", "ray", "optuna", "mlflow", "numpy"} <= set(provenance["versions"])
    data = provenance["data"]
    assert data["task"] == "digits" and all(len(data[s]) == 64 for s in ("train", "val", "test"))
    assert data["test"] == json.loads((out / "test_reads.jsonl").read_text().splitlines()[0])["sha256"]
    assert results["test_reads"] == {row["checkpoint"]: 1 for row in rows}
    for variant, entry in results["summary"].items():
        assert (entry["n_attempted"], entry["n_used"], entry["seeds_not_used"]) == (1, 1, []), variant
    assert all((row["test_device"], row["test_precision"]) == ("cpu", "fp32") for row in rows)
    # train_acc: the tested checkpoint itself in eval mode on the first training rows (not the epoch's running
    # minibatch mean, which the trial logs as train_acc_running).
    spec = load_spec(out / "spec.yaml")
    data = load_task(TaskRequest("digits"))
    for row in rows:
        again = accuracy_on(spec, data.info, row["checkpoint"], train_sample(data), row["variant"])
        assert row["train_acc"] == pytest.approx(again.accuracy), row["variant"]
    assert all(entry["train_acc_mean"] is not None for entry in results["summary"].values())
    # The curve is over the same per-trial scores MLflow holds (what the report draws it from).
    parent = results["mlflow"]["parent_run_id"]
    budget = results["expected_max"]
    for variant in ("scratch", "spt"):
        logged = sorted(r.data.metrics["best_val_acc"] for r in _children(runs, parent)
                        if r.data.tags.get("sptune.phase") == "search" and r.data.tags.get("sptune.variant") == variant)
        curve = budget["variants"][variant]
        assert curve["n_trials"] == len(logged) == 3 and curve["by_n"][0] == pytest.approx(sum(logged) / 3)
        assert curve["by_n"][-1] == pytest.approx(max(logged))
    assert budget["order_vs"] == {"spt": "scratch"} and "spt" in budget["order_flips_at"]
    md = (out / "results.md").read_text()
    for line in ("| variant | seeds used / tried |", "Expected best validation accuracy vs search budget",
                 "| trials | scratch | spt |", "Test split reads: 2 for 2 checkpoint(s).", "Provenance: commit "):
        assert line in md, line


def test_no_credentials_or_environment_reach_mlflow(study):
    _, _, client, runs = study
    for run in runs:
        fresh = client.get_run(run.info.run_id)
        logged = {**fresh.data.params, **fresh.data.tags}
        assert not any(SECRET in str(v) for v in logged.values()), run.info.run_name
        assert not any(key.upper().startswith(("AWS_", "MLFLOW_TRACKING_PASSWORD")) for key in logged)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_mlflow_ui_opens_on_the_training_runs(study, tmp_path):
    """A real `mlflow server` on the study's store, the printed runs URL in headless Chromium:
    the page is the model-training runs table (not MLflow 3's GenAI overview)."""
    import shutil
    import subprocess
    import sys
    import urllib.request

    from sptune.tracking.mlflow_tracker import runs_url
    from tests.helpers_cluster import START_TIMEOUT_S, wait_for

    chromium = shutil.which("chromium")
    if chromium is None:
        pytest.skip("chromium is not installed (the README's test command installs it)")
    out, results, _, _ = study
    port = _free_port()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
         "--backend-store-uri", results["mlflow"]["tracking_uri"],
         "--default-artifact-root", str(out / "mlartifacts")],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).status == 200,
                 START_TIMEOUT_S, "mlflow server", server=server)
        url = runs_url(f"http://127.0.0.1:{port}", results["mlflow"]["experiment_id"])
        browser = headless(tmp_path / "profile", "--window-size=1400,900", "--virtual-time-budget=20000")
        dom = subprocess.run([*browser, "--dump-dom", url], capture_output=True, text=True, timeout=120).stdout
        shot = tmp_path / "mlflow_runs.png"
        subprocess.run([*browser, f"--screenshot={shot}", url], capture_output=True, timeout=120)
    finally:
        os.killpg(server.pid, 15)
        server.wait(timeout=30)
    _, _, _, runs = study
    assert "Run Name" in dom  # the runs table's header: absent from the GenAI overview
    assert f"<strong>{len(runs)}</strong> matching runs" in dom  # parent + every trial's child run
    assert "Detect Issues" not in dom  # the GenAI overview page's marker
    assert shot.stat().st_size > 20_000


def test_the_parent_run_says_where_its_numbers_came_from(study, repo_root):
    out, results, client, runs = study
    [parent] = [r for r in runs if r.info.run_id == results["mlflow"]["parent_run_id"]]
    params = parent.data.params
    for library in ("python", "torch", "ray", "mlflow", "optuna"):
        assert params[f"version.{library}"] not in ("", "not installed"), library
    assert params["device"].startswith(("cpu:", "cuda:"))
    assert "--set" not in params["command.overrides"] and "finetune.epochs=4" in params["command.overrides"]
    if (Path(repo_root) / ".git").exists():  # a git checkout (CI's fresh clone is one)
        assert len(params["git.commit"]) == 40 and params["git.dirty"] in ("true", "false")
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id, "spec/given")}
    assert artifacts == {"spec/given/digits_quick.yaml"}
    resolved = client.download_artifacts(parent.info.run_id, "spec/resolved/spec.yaml", str(out / "check"))
    assert Path(resolved).read_text() == (out / "spec.yaml").read_text()
    # Every child run carries every training parameter and the per-epoch training curves.
    child = next(r for r in _children(runs, parent.info.run_id) if r.data.tags["sptune.phase"] == "search")
    for key in ("optim.weight_decay", "optim.warmup_fraction", "optim.grad_clip", "optim.precision", "optim.betas"):
        assert key in child.data.params, key
    for metric in ("lr", "grad_norm", "loss", "train_acc_running"):
        assert client.get_metric_history(child.info.run_id, metric), metric
