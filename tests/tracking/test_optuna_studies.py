"""Each variant's Optuna search persisted as an Optuna study (sptune/tracking/optuna_studies.py).

Without Ray: naming, redaction, the searchers' studies and their pickling (Ray saves searchers
into the experiment), importances, and the preflight of --optuna-storage (a real PostgreSQL
server that answers, and a port where none does). With Ray, two small studies: one on the
default OUTPUT/optuna.db (studies, their attributes, the dashboard in headless Chromium), one on
PostgreSQL killed mid-search and resumed (the same studies continue; no password on disk).
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import optuna
import pytest

from sptune.plan.study_plan import build_plan
from sptune.spec import load_spec
from sptune.sweep import main
from sptune.tasks.base import TaskInfo
from sptune.tracking.optuna_studies import (
    OptunaTarget,
    default_url,
    open_storage,
    redact,
    variant_importances,
)
from tests.helpers_browser import headless, screenshot_path
from tests.helpers_tiny import PLAIN, SHOWN_TRIALS

optuna.logging.set_verbosity(optuna.logging.WARNING)

PASSWORD = "pg-Secret-7f3a91"
SPEC_NAME = "digits_quick"
CHROMIUM = shutil.which("chromium")
DONE = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL, optuna.trial.TrialState.PRUNED)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spec(repo_root: str) -> str:
    return str(Path(repo_root) / "search_spaces" / "digits_quick.yaml")


def _pg_bin() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    return versions[-1].parent if versions else None


@pytest.fixture(scope="module")
def postgres():
    """A real PostgreSQL server on 127.0.0.1 with password (SCRAM) login; its URL holds the password."""
    bin_dir = _pg_bin()
    if bin_dir is None:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) are not installed: apt-get install postgresql")
    root = Path(tempfile.mkdtemp(prefix="sptune-pg-"))  # under /tmp: the postgres user must enter it
    (root / "pw").write_text(PASSWORD)
    as_user: list[str] = []
    if os.getuid() == 0:  # PostgreSQL refuses to run as root
        as_user = ["runuser", "-u", "postgres", "--"]
        for path in (root, root / "pw"):
            shutil.chown(path, "postgres")
    port = _free_port()
    data = root / "data"

    def pg(*cmd: str) -> None:
        subprocess.run([*as_user, *cmd], check=True, capture_output=True, timeout=120)

    pg(
        str(bin_dir / "initdb"),
        "-D",
        str(data),
        "--username",
        "sptune",
        "--pwfile",
        str(root / "pw"),
        "--auth",
        "scram-sha-256",
        "-E",
        "UTF8",
    )
    pg(
        str(bin_dir / "pg_ctl"),
        "-D",
        str(data),
        "-l",
        str(root / "log"),
        "-w",
        "-o",
        f"-k {root} -h 127.0.0.1 -p {port}",
        "start",
    )
    try:
        yield f"postgresql://sptune:{PASSWORD}@127.0.0.1:{port}/postgres"
    finally:
        pg(str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "fast", "stop")
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def plan(repo_root):
    spec = load_spec(Path(_spec(repo_root)), [])
    return build_plan(spec, TaskInfo("digits", "continuous", 64, 10, levels=17), cluster_cpus=2)


# --- naming, redaction, the searchers' studies (no Ray started) ---------------------------------


def test_redact_hides_every_form_of_password():
    assert redact("postgresql://bob:s3cret@db:5432/optuna") == "postgresql://bob:***@db:5432/optuna"
    assert "s3cret" not in redact("postgresql://bob@db/optuna?password=s3cret")
    assert "s3cret" not in redact("not a url://bob:s3cret@db")  # unparseable: still hidden
    assert redact("sqlite:////runs/x/optuna.db") == "sqlite:////runs/x/optuna.db"


def _feed(searcher, n: int, offset: int = 0) -> list[str]:
    """Propose and finish n trials of the one variant in the searcher (values rise with the index)."""
    trials = [f"t_{offset + i:05d}" for i in range(n)]
    for i, trial in enumerate(trials):
        config = searcher.suggest(trial)
        assert isinstance(config, dict)
        result = {**config, "training_iteration": 1, "val_acc": 0.5 + i / 100, "best_val_acc": 0.5 + i / 100}
        searcher.on_trial_complete(trial, result)
    return trials


def test_a_variants_search_is_a_described_optuna_study(plan, tmp_path):
    from sptune.judging.stage_graph import Stage
    from sptune.tuning.tuner import staged_search

    target = OptunaTarget(default_url(tmp_path), SPEC_NAME, "digits")
    scratch = next(s for s in plan.variant_searches() if s.variant == "scratch")
    searcher, _ = staged_search(plan, [Stage(scratch)], {}, {}, target)
    trials = _feed(searcher, plan.spec.searcher.batch_size)
    study = optuna.load_study(study_name=f"{SPEC_NAME}/scratch", storage=default_url(tmp_path))
    attrs = study.user_attrs
    assert attrs["variant"] == "scratch" and attrs["task"] == "digits" and attrs["phase"] == "search"
    assert (attrs["metric"], attrs["direction"]) == ("best_val_acc", "max")
    assert attrs["search_space"]["lr"] == {
        "type": "loguniform",
        "low": scratch.space.lr.low,
        "high": scratch.space.lr.high,
        "values": None,
        "extend": True,  # digits_quick widens a range whose pick sits at a bound (the LR extension)
    }
    assert study.direction == optuna.study.StudyDirection.MAXIMIZE
    assert [t.user_attrs["ray_trial_id"] for t in study.trials] == trials
    assert [t.value for t in study.trials] == [0.5 + i / 100 for i in range(len(trials))]
    assert all(t.user_attrs["told_at_epoch"] == 1 for t in study.trials)
    # The value told is the best-so-far score at the first rung (digits_quick: sha, grace 5), not at the best
    # epoch selection uses: the database, the dashboard's objective name and the searcher's own study say so.
    told = "best_val_acc at epoch 5 (the first rung)"
    assert attrs["value_is"] == told and study.metric_names == [told]
    assert searcher.searchers["search-scratch"].inner._ot_study.metric_names == [told]


@pytest.mark.parametrize("overrides, told", [
    (["scheduler.type=fifo"], "best_val_acc when the trial ended"),
    (["searcher.mode=async", "scheduler.type=asha"], "best_val_acc when the trial ended"),
    (["scheduler.type=asha", "scheduler.grace_period=2"], "best_val_acc at epoch 2 (the first rung)"),
])  # fmt: skip
def test_the_value_told_is_named_as_it_is(repo_root, overrides, told):
    from sptune.tuning.searchers import told_value

    spec = load_spec(Path(_spec(repo_root)), overrides)
    plan = build_plan(spec, TaskInfo("digits", "continuous", 64, 10, levels=17), cluster_cpus=2)
    assert told_value(plan, plan.variant_searches()[0]) == told
    assert told_value(plan, plan.pretrainings()[0]) == told.replace("best_val_acc", "best_val_loss")


def test_a_pickled_searcher_continues_the_same_study_without_the_password(plan, postgres):
    """Ray pickles each searcher into the experiment (tuner.pkl, searcher state): the storage goes
    with it, without its password; unpickled in a process that knows the URL, it continues."""
    from sptune.judging.stage_graph import Stage
    from sptune.tuning.tuner import staged_search

    target = OptunaTarget(postgres, "pickled", "digits")
    spt = next(s for s in plan.variant_searches() if s.variant == "spt")
    searcher, _ = staged_search(plan, [Stage(spt)], {}, {}, target)
    batch = plan.spec.searcher.batch_size
    _feed(searcher, batch)
    saved = pickle.dumps(searcher)
    assert PASSWORD.encode() not in saved
    restored = pickle.loads(saved)
    _feed(restored, spt.n_trials - batch, offset=batch)  # the rest: a last, smaller batch
    names = [n for n in optuna.get_all_study_names(open_storage(postgres)) if n.startswith("pickled/")]
    assert names == ["pickled/spt"]  # one study, continued: no duplicate
    study = optuna.load_study(study_name="pickled/spt", storage=open_storage(postgres))
    assert len(study.trials) == spt.n_trials and all(t.state in DONE for t in study.trials)


def _importance_run(tmp_path: Path, plan, trials: dict[str, int]) -> Path:
    """A run directory whose variants' studies hold the given numbers of COMPLETE trials."""
    target = OptunaTarget(default_url(tmp_path), "imp", "digits")
    target.record(tmp_path, plan.searches, default=True)
    by_variant = {s.variant: s for s in plan.variant_searches()}
    for variant, n in trials.items():
        study = target.create(by_variant[variant])
        for i in range(n):
            trial = study.ask()
            lr = trial.suggest_float("lr", 1e-4, 1e-1, log=True)
            trial.suggest_categorical("batch_size", [16, 32])
            study.tell(trial, lr * 10 + i * 1e-6)  # the value follows lr
    return tmp_path


def test_variant_importances_from_optunas_default_evaluator(plan, tmp_path):
    run = _importance_run(tmp_path, plan, {"scratch": 12, "spt": 3})
    found = variant_importances(run)
    assert set(found) == {"scratch"}  # spt: too few COMPLETE trials to say anything
    assert set(found["scratch"]) == {"lr", "batch_size"}
    assert sum(found["scratch"].values()) == pytest.approx(1.0)
    assert found["scratch"]["lr"] > found["scratch"]["batch_size"]
    assert variant_importances(tmp_path / "nothing-here") == {}


def test_importances_from_a_database_whose_password_is_unknown_are_left_out(tmp_path, monkeypatch):
    monkeypatch.delenv("SPTUNE_OPTUNA_STORAGE", raising=False)
    record = {"storage": "postgresql://bob:***@db.invalid:5432/optuna", "studies": {"scratch": "x/scratch"}}
    (tmp_path / "optuna.json").write_text(json.dumps(record))
    with pytest.warns(UserWarning, match="password") as caught:
        assert variant_importances(tmp_path) == {}
    assert "bob:***@" in str(caught[0].message)


# --- preflight of --optuna-storage (nothing starts on a refusal) ---------------------------------


def _refused(repo_root, tmp_path, capsys, url: str) -> tuple[int, str]:
    out = tmp_path / "never"
    code = main([_spec(repo_root), "--output", str(out), "--optuna-storage", url])
    err = capsys.readouterr().err
    assert not out.exists()  # nothing written
    return code, err


def test_an_unreachable_database_is_refused_before_anything_starts(repo_root, tmp_path, capsys):
    import ray

    ray_was_up = ray.is_initialized()
    url = f"postgresql://bob:{PASSWORD}@127.0.0.1:{_free_port()}/optuna"
    code, err = _refused(repo_root, tmp_path, capsys, url)
    assert code == 1
    assert err.count("\n") == 1 and err.startswith("sptune: error: --optuna-storage postgresql://bob:***@127.0.0.1")
    assert "does not answer" in err and "Fix:" in err and PASSWORD not in err
    assert ray.is_initialized() == ray_was_up  # no Ray started for a refused study


def test_a_malformed_url_is_refused(repo_root, tmp_path, capsys):
    code, err = _refused(repo_root, tmp_path, capsys, f"postgres ql://bob:{PASSWORD}@db")
    assert code == 2 and "not a database URL" in err and PASSWORD not in err
    code, err = _refused(repo_root, tmp_path, capsys, "sqlite://")
    assert code == 2 and "in-memory" in err


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
    port = _free_port()
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
        api = _wait_for_json(f"http://127.0.0.1:{port}/api/studies")
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


def _wait_for_json(url: str, timeout_s: float = 60) -> dict:
    deadline = time.time() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return json.loads(response.read())
        except OSError:
            if time.time() > deadline:
                raise
            time.sleep(0.3)


# --- PostgreSQL, killed mid-search and resumed ----------------------------------------------------

# fmt: off
RESUME = [
    "--set", "pretrain.epochs=2", "--set", "pretrain.num_samples=2",
    "--set", "finetune.epochs=3", "--set", "variants.scratch.num_samples=3", "--set", "variants.spt.num_samples=3",
    "--set", "scheduler.type=fifo", "--set", "model.n_layers=1", "--set", "rerun_seeds=1", *PLAIN,
]
# fmt: on
RESUME_TRIALS = {"pretrain": 2, "scratch": 3, "spt": 3}


def _kill_mid_search(out: Path, cmd: list[str], env: dict) -> None:
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 240
    try:
        while time.time() < deadline and proc.poll() is None:
            searched = [t for t in (out / "ray_results" / "study").glob("*/params.json")
                        if '"phase": "search"' in t.read_text()]  # fmt: skip
            if any(list(t.parent.glob("checkpoint_*")) for t in searched):
                break
            time.sleep(0.05)
        else:
            pytest.fail("the study never reached the variants' search")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and the Ray processes it started
        proc.wait()


def _ray_trial_ids(out: Path, variant: str) -> set[str]:
    """The Ray trials of a variant's search that ran to the end (their MLflow child runs)."""
    from mlflow.tracking import MlflowClient

    mlflow = json.loads((out / "results.json").read_text())["mlflow"]
    runs = MlflowClient(mlflow["tracking_uri"]).search_runs(
        [mlflow["experiment_id"]], f"tags.mlflow.parentRunId = '{mlflow['parent_run_id']}'", max_results=1000
    )
    return {
        r.data.tags["sptune.trial_id"]
        for r in runs
        if r.info.status == "FINISHED"
        and r.data.tags["sptune.phase"] == "search"
        and r.data.tags["sptune.variant"] == variant
    }


def _studies(url: str, prefix: str) -> dict[str, optuna.Study]:
    storage = open_storage(url)
    names = [n for n in optuna.get_all_study_names(storage) if n.startswith(prefix)]
    return {n.removeprefix(prefix): optuna.load_study(study_name=n, storage=storage) for n in names}


def test_resume_continues_the_same_studies_in_postgresql(ray_session, repo_root, tmp_path, postgres, capsys):
    out = tmp_path / "interrupted"
    # The URL through the environment: a password on the command line would show in `ps`.
    # TUNE_GLOBAL_CHECKPOINT_S: the kill is timed from params.json under the storage, which Tune's driver copies
    # there with each snapshot (by default >= 10 s apart, longer than the tiny search lasts).
    env = {**os.environ, "PYTHONPATH": repo_root, "SPTUNE_OPTUNA_STORAGE": postgres, "TUNE_GLOBAL_CHECKPOINT_S": "1"}
    _kill_mid_search(out, [sys.executable, "-m", "sptune.sweep", _spec(repo_root), "--output", str(out), *RESUME], env)
    prefix = f"{SPEC_NAME}/"
    assert set(_studies(postgres, prefix)) == set(RESUME_TRIALS)  # the search's studies exist already

    assert main([_spec(repo_root), "--output", str(out), "--resume", *RESUME]) == 2  # not in its database
    assert "sptune:***@127.0.0.1" in capsys.readouterr().err
    assert main([_spec(repo_root), "--output", str(out), "--resume", "--optuna-storage", postgres, *RESUME]) == 0

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
    assert main([_spec(repo_root), "--output", str(again), "--optuna-storage", postgres, *RESUME]) == 2
    assert "already holds Optuna studies" in capsys.readouterr().err and not again.exists()
