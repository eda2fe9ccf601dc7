"""Whole studies' Optuna studies (sptune/tracking/optuna_studies.py): one on the default OUTPUT/optuna.db (its
studies, their attributes, importances, the dashboard in headless Chromium), one on PostgreSQL killed mid-search
and resumed (the same studies continue; no password on disk). Without Ray: tests/tracking/test_optuna_studies.py.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import optuna
import pytest

from sptune.sweep import main
from sptune.tracking.optuna_studies import default_url, open_storage, redact, variant_importances
from tests.helpers_browser import headless, screenshot_path
from tests.helpers_cluster import START_TIMEOUT_S, free_port, wait_for
from tests.helpers_optuna import DONE, PASSWORD, SPEC_NAME, spec_path
from tests.helpers_tiny import PLAIN, SHOWN_TRIALS, child_runs, kill_driver_when, trial_checkpointed

optuna.logging.set_verbosity(optuna.logging.WARNING)

CHROMIUM = shutil.which("chromium")


# --- a study on the default OUTPUT/optuna.db ------------------------------------------------------

N_TRIALS = SHOWN_TRIALS


@pytest.fixture(scope="module")
def study(shown_study):
    """conftest's `shown_study` (one CLI run shared with test_ui), on the default OUTPUT/optuna.db."""
    return shown_study.out, shown_study.stdout


def test_each_searched_variant_leaves_its_study_in_optuna_db(study):
    out, printed = study
    url = default_url(out)
    names = sorted(optuna.get_all_study_names(url))
    assert names == sorted(f"{SPEC_NAME}/{v}" for v in N_TRIALS)
    for variant, n in N_TRIALS.items():
        optuna_study = optuna.load_study(study_name=f"{SPEC_NAME}/{variant}", storage=url)
        assert optuna_study.user_attrs["variant"] == variant and optuna_study.user_attrs["task"] == "digits"
        assert set(optuna_study.user_attrs["search_space"]) == {"lr", "batch_size"}
        metric = "best_val_loss" if variant == "pretrain" else "best_val_acc"
        assert optuna_study.metric_names == [f"{metric} at epoch 1 (the first rung)"]  # SHOWN: sha, grace 1
        trials = optuna_study.trials
        assert len(trials) == n  # one Optuna trial per planned trial, none left RUNNING
        assert all(t.state == optuna.trial.TrialState.COMPLETE and t.value is not None for t in trials)
        assert len({t.user_attrs["ray_trial_id"] for t in trials}) == n
    assert json.loads((out / "optuna.json").read_text())["storage"] is None
    assert f"optuna-dashboard {url}" in printed


def test_importances_of_a_real_study(study):
    out, _ = study
    found = variant_importances(out)
    assert set(found) == {"scratch", "spt"}  # pretraining: 2 trials, too few
    assert all(sum(v.values()) == pytest.approx(1.0) for v in found.values())


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (the README's test command installs it)")
def test_optuna_dashboard_shows_the_studies(study, repo_root, tmp_path):
    """A real optuna-dashboard on the study's optuna.db, its study list in headless Chromium."""
    out, _ = study
    port = free_port()
    beside_python = Path(sys.executable).parent / "optuna-dashboard"  # the dev extra's console script
    dashboard = str(beside_python) if beside_python.exists() else shutil.which("optuna-dashboard")
    assert dashboard, "optuna-dashboard is not installed: pip install -e '.[dev]'"
    server = subprocess.Popen(
        [dashboard, default_url(out), "--host", "127.0.0.1", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        api = wait_for(lambda: _json(f"http://127.0.0.1:{port}/api/studies"), START_TIMEOUT_S, "optuna-dashboard",
                       server=server)
        url = f"http://127.0.0.1:{port}/dashboard/"
        chromium = headless(tmp_path / "profile", "--window-size=1400,900", "--virtual-time-budget=10000")
        dom = subprocess.run([*chromium, "--dump-dom", url], capture_output=True, text=True, timeout=120).stdout
        shot = screenshot_path("optuna-dashboard.png")
        subprocess.run([*chromium, f"--screenshot={shot}", url], capture_output=True, timeout=120)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)
    listed = {s["study_name"] for s in api["study_summaries"]}
    assert listed == {f"{SPEC_NAME}/{v}" for v in N_TRIALS}
    for name in listed:
        assert name in dom
    assert shot.stat().st_size > 10_000


def _json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=2) as response:
        return json.loads(response.read())


# --- PostgreSQL, killed mid-search and resumed ----------------------------------------------------

# fmt: off
RESUME = [
    "--set", "pretrain.epochs=2", "--set", "pretrain.num_samples=2",
    "--set", "finetune.epochs=3", "--set", "variants.scratch.num_samples=3", "--set", "variants.spt.num_samples=3",
    "--set", "scheduler.type=fifo", "--set", "model.n_layers=1", "--set", "rerun_seeds=1", *PLAIN,
    "--set", "model.d_model=32", "--set", "model.d_ff=64",  # half digits_quick's width: an epoch costs ~27 % less
]
# fmt: on
RESUME_TRIALS = {"pretrain": 2, "scratch": 3, "spt": 3}


def _ray_trial_ids(out: Path, variant: str) -> set[str]:
    """The Ray trials of a variant's search that ran to the end (their MLflow child runs)."""
    return {
        r.data.tags["sptune.trial_id"]
        for r in child_runs(out)
        if r.info.status == "FINISHED"
        and r.data.tags["sptune.phase"] == "search"
        and r.data.tags["sptune.variant"] == variant
    }


def _studies(url: str, prefix: str) -> dict[str, optuna.Study]:
    storage = open_storage(url)
    names = [n for n in optuna.get_all_study_names(storage) if n.startswith(prefix)]
    return {n.removeprefix(prefix): optuna.load_study(study_name=n, storage=storage) for n in names}


# Heavy: resume runs in test_resume; a restored searcher goes on in PostgreSQL in tests/tracking/test_optuna_studies.
@pytest.mark.heavy
def test_resume_continues_the_same_studies_in_postgresql(ray_session, repo_root, tmp_path, postgres, capsys):
    out = tmp_path / "interrupted"
    # The URL through the environment: a password on the command line would show in `ps`.
    kill_driver_when(lambda: trial_checkpointed(out, '"phase": "search"'),
                     [spec_path(repo_root), "--output", str(out), *RESUME], repo_root,
                     waiting_for="the variants' search", extra_env={"SPTUNE_OPTUNA_STORAGE": postgres})
    prefix = f"{SPEC_NAME}/"
    assert set(_studies(postgres, prefix)) == set(RESUME_TRIALS)  # the search's studies exist already

    assert main([spec_path(repo_root), "--output", str(out), "--resume", *RESUME]) == 2  # not in its database
    assert "sptune:***@127.0.0.1" in capsys.readouterr().err
    assert main([spec_path(repo_root), "--output", str(out), "--resume", "--optuna-storage", postgres, *RESUME]) == 0

    studies = _studies(postgres, prefix)
    assert set(studies) == set(RESUME_TRIALS)  # the same studies continued, no duplicate
    for variant, n in RESUME_TRIALS.items():
        trials = studies[variant].trials
        assert all(t.state in DONE for t in trials)  # none left RUNNING
        told = {t.user_attrs["ray_trial_id"] for t in trials if t.state == optuna.trial.TrialState.COMPLETE}
        assert len(told) >= n
        if variant != "pretrain":  # every trial of the search was told to its study
            assert _ray_trial_ids(out, variant) <= told and len(_ray_trial_ids(out, variant)) == n
    assert json.loads((out / "optuna.json").read_text())["storage"] == redact(postgres)
    leaked = [p for p in out.rglob("*") if p.is_file() and PASSWORD.encode() in p.read_bytes()]
    assert leaked == []  # not in Ray's pickled searchers, MLflow's params, the state or the results

    # A new study of the same name in the same database would continue these searches: refused.
    again = tmp_path / "again"
    assert main([spec_path(repo_root), "--output", str(again), "--optuna-storage", postgres, *RESUME]) == 2
    assert "already holds Optuna studies" in capsys.readouterr().err and not again.exists()
