"""A study outlives its services' outages: the real `mlflow server` it tracks in and the PostgreSQL database its
Optuna searches are in, each stopped mid-study and started again; the study finishes with every trial's every epoch
in MLflow and every Optuna trial told. An outage longer than the clients wait (a short wait set here) stops the
study as an interrupt does: one paragraph, exit 75, and `--resume` finishes it once the service is back."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import optuna
import pytest
from mlflow.tracking import MlflowClient

from sptune.sweep import main
from sptune.tracking.optuna_studies import OUTAGE_ENV, open_storage
from tests.helpers_cluster import MlflowServer
from tests.helpers_optuna import postgres_server

SPEC = """
name: outages
task: {name: digits}
model: {d_model: 32, n_layers: 1, n_heads: 4, d_ff: 64}
finetune: {epochs: 4}
variants:
  scratch:
    num_samples: 4
    search:
      lr: {type: loguniform, low: 1.0e-3, high: 3.0e-3}
      batch_size: {type: choice, values: [64]}
scheduler: {type: fifo}
searcher: {type: optuna}
"""
EPOCHS, TRIALS = 4, 4
OUTAGE_S = 4.0


def _epochs_reported(out: Path) -> int:
    """Results Tune wrote to the trials' folders so far."""
    return sum(len(p.read_text().splitlines()) for p in (out / "ray_results" / "study").glob("*/result.json"))


def _when(ready, act) -> threading.Thread:
    def watch() -> None:
        deadline = time.time() + 240
        while time.time() < deadline and not ready():
            time.sleep(0.05)
        act()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


@pytest.fixture
def services(tmp_path):
    server = MlflowServer(tmp_path / "mlflow")
    server.launch()
    with postgres_server() as db:
        try:
            server.wait()
            yield server, db
        finally:
            server.stop()


def _finished_everything(out: Path, server: MlflowServer, db_url: str) -> None:
    results = json.loads((out / "results.json").read_text())
    client = MlflowClient(server.uri)
    parent = results["mlflow"]["parent_run_id"]
    children = client.search_runs([results["mlflow"]["experiment_id"]], f"tags.mlflow.parentRunId = '{parent}'")
    assert [c.info.status for c in children] == ["FINISHED"] * TRIALS
    for child in children:
        steps = sorted(m.step for m in client.get_metric_history(child.info.run_id, "val_acc"))
        assert steps == list(range(1, EPOCHS + 1)), child.info.run_name
    study = optuna.load_study(study_name="outages/scratch", storage=open_storage(db_url))
    states = [t.state for t in study.trials]
    assert states.count(optuna.trial.TrialState.COMPLETE) == TRIALS and optuna.trial.TrialState.RUNNING not in states


def test_a_study_waits_out_its_services_outages(ray_session, tmp_path, services, capsys):
    server, db = services
    spec, out = tmp_path / "outages.yaml", tmp_path / "out"
    spec.write_text(SPEC)
    downs: list[str] = []

    def outages() -> None:  # MLflow's server down and up again, then the database
        server.stop()
        downs.append(f"mlflow down at {_epochs_reported(out)} results")
        time.sleep(OUTAGE_S)
        server.launch()
        server.wait()
        db.stop()
        downs.append(f"postgres down at {_epochs_reported(out)} results")
        time.sleep(OUTAGE_S)
        db.start()

    watcher = _when(lambda: _epochs_reported(out) >= 1, outages)
    argv = [str(spec), "--output", str(out), "--tracking-uri", server.uri, "--optuna-storage", db.url]
    assert main(argv) == 0, capsys.readouterr().err[-3000:]
    watcher.join(timeout=60)
    print(downs)
    assert len(downs) == 2 and _epochs_reported(out) == EPOCHS * TRIALS
    _finished_everything(out, server, db.url)


@pytest.mark.heavy  # the exit-75 stop and resume; the wait itself runs above
def test_an_outage_longer_than_the_wait_stops_the_study_resumably(ray_session, tmp_path, services, capsys,
                                                                  monkeypatch):
    server, db = services
    spec, out = tmp_path / "outages.yaml", tmp_path / "out"
    spec.write_text(SPEC)
    monkeypatch.setenv(OUTAGE_ENV, "2")
    watcher = _when(lambda: _epochs_reported(out) >= 1, db.stop)
    argv = [str(spec), "--output", str(out), "--tracking-uri", server.uri, "--optuna-storage", db.url]
    assert main(argv) == 75
    watcher.join(timeout=10)
    err = capsys.readouterr().err
    paragraph = err.strip().splitlines()[-1]
    assert paragraph.startswith("sptune: stopped") and "a service stopped answering" in paragraph, err[-3000:]
    assert "Traceback" not in err and f"--output {out}" in paragraph and "--resume" in paragraph
    assert "(exit status 75)" in paragraph
    db.start()
    monkeypatch.delenv(OUTAGE_ENV)
    assert main([*argv, "--resume"]) == 0
    _finished_everything(out, server, db.url)
