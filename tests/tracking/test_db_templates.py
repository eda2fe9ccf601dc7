"""A new study's SQLite MLflow store and Optuna database are copies of empty ones made once
(sptune.tracking.db_templates): each must be what its library would have made, and an existing one must
never be touched."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import optuna
import pytest
from mlflow.tracking import MlflowClient

from sptune.tracking.mlflow_db import seed_new_store
from sptune.tracking.mlflow_tracker import Tracker
from sptune.tracking.optuna_studies import open_storage


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("SPTUNE_CACHE_DIR", str(root))
    return root


def _uri(path: Path) -> str:
    return f"sqlite:///{path}"


def _schema(db: Path, *version_tables: str) -> tuple[list, list[tuple]]:
    """The schema's version rows and every table's columns: what the library's set-up leaves."""
    with sqlite3.connect(db) as conn:
        versions = [row for t in ("alembic_version", *version_tables) for row in conn.execute(f'SELECT * FROM "{t}"')]
        tables = sorted(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))
        columns = [(t, c[1], c[2]) for t in tables for c in conn.execute(f'PRAGMA table_info("{t}")')]
    conn.close()
    return versions, columns


def _template(cache: Path, library: str = "mlflow") -> Path:
    (template,) = (cache / "stores").glob(f"{library}-*.db")
    return template


def test_a_seeded_store_is_the_store_mlflow_makes(tmp_path, cache):
    fresh = tmp_path / "fresh.db"
    MlflowClient(tracking_uri=_uri(fresh)).search_experiments()  # MLflow runs its migrations itself
    seed_new_store(_uri(tmp_path / "first.db"), tmp_path)  # makes the template
    time.sleep(0.01)
    seeded = tmp_path / "out" / "mlflow.db"
    seeded.parent.mkdir()

    seeding = int(time.time() * 1000)
    assert seed_new_store(_uri(seeded), tmp_path / "out" / "mlartifacts")
    assert _schema(seeded) == _schema(fresh)
    default = MlflowClient(tracking_uri=_uri(seeded)).get_experiment("0")
    assert default.name == "Default" and default.lifecycle_stage == "active"
    # Pinned inside the output directory, as sptune pins the study's own experiment, not ./mlruns.
    assert default.artifact_location == (tmp_path / "out" / "mlartifacts" / "0").resolve().as_uri()
    # Made when the copy was, not when the template was.
    with sqlite3.connect(_template(cache)) as conn:
        (made,) = conn.execute("SELECT creation_time FROM experiments WHERE experiment_id = 0").fetchone()
    conn.close()
    assert made < seeding <= default.creation_time


def test_the_template_is_made_once_and_trackers_work_on_copies(tmp_path, cache):
    experiments = {}
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        tracker = Tracker(_uri(tmp_path / name / "mlflow.db"), "study", tmp_path / name)
        run_id = tracker.start_parent("run", {"lr": 0.001})
        tracker.finish()
        assert tracker.client.get_run(run_id).data.params == {"lr": "0.001"}
        experiments[name] = tracker.experiment_id
        if name == "a":
            made = _template(cache).stat()
    again = _template(cache).stat()
    assert (again.st_ino, again.st_mtime_ns) == (made.st_ino, made.st_mtime_ns)
    # Each study's store is its own file: b's run is not in a's store.
    store_a = MlflowClient(tracking_uri=_uri(tmp_path / "a" / "mlflow.db"))
    assert len(store_a.search_runs([experiments["a"]])) == 1


def test_an_existing_store_is_never_touched(tmp_path, cache):
    db = tmp_path / "mlflow.db"
    tracker = Tracker(_uri(db), "study", tmp_path)
    tracker.start_parent("run", {})
    before = db.read_bytes()
    assert not seed_new_store(_uri(db), tmp_path / "mlartifacts")
    assert db.read_bytes() == before


def test_other_stores_and_missing_folders_are_left_to_mlflow(tmp_path, cache):
    assert not seed_new_store("http://127.0.0.1:5000", tmp_path)
    assert not seed_new_store("postgresql://user@127.0.0.1/db", tmp_path)
    assert not seed_new_store(_uri(tmp_path / "no" / "such" / "dir" / "mlflow.db"), tmp_path)
    assert not (cache / "stores").exists()  # nothing made for them


def test_an_unreadable_template_is_made_again(tmp_path, cache):
    (tmp_path / "a").mkdir()
    assert seed_new_store(_uri(tmp_path / "a" / "mlflow.db"), tmp_path / "a")
    _template(cache).write_bytes(b"not a database: a disk filled while it was written")

    (tmp_path / "b").mkdir()
    assert seed_new_store(_uri(tmp_path / "b" / "mlflow.db"), tmp_path / "b")
    assert _schema(tmp_path / "b" / "mlflow.db") == _schema(tmp_path / "a" / "mlflow.db")
    assert _template(cache).read_bytes().startswith(b"SQLite format 3")
    assert not list((tmp_path / "b").glob(".*partial"))  # no partial copy left behind


def test_a_seeded_optuna_database_is_the_one_optuna_builds(tmp_path, cache):
    optuna.storages.RDBStorage(_uri(tmp_path / "fresh.db")).engine.dispose()
    (tmp_path / "out").mkdir()
    seeded = tmp_path / "out" / "optuna.db"

    storage = open_storage(_uri(seeded))  # a new output directory's database, as a study opens it
    assert _schema(seeded, "version_info") == _schema(tmp_path / "fresh.db", "version_info")
    assert _template(cache, "optuna").is_file()
    study = optuna.create_study(storage=storage, study_name="study/scratch", direction="maximize")
    study.optimize(lambda trial: trial.suggest_float("lr", 1e-4, 1e-2, log=True), n_trials=3)
    assert len(optuna.load_study(study_name="study/scratch", storage=_uri(seeded)).trials) == 3


def test_an_existing_optuna_database_is_opened_as_it_is(tmp_path, cache):
    db = tmp_path / "optuna.db"
    optuna.create_study(storage=_uri(db), study_name="kept").optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    before = db.read_bytes()
    open_storage(_uri(db))
    assert db.read_bytes() == before
    assert not (cache / "stores").exists()  # nothing copied, so no template needed


def test_studies_seeding_one_file_at_once_leave_one_intact_store(tmp_path, cache):
    from concurrent.futures import ThreadPoolExecutor

    seed_new_store(_uri(tmp_path / "warm.db"), tmp_path)  # the template exists: the copies race, not its making
    db = tmp_path / "shared" / "mlflow.db"
    db.parent.mkdir()
    with ThreadPoolExecutor(8) as pool:
        seeded = list(pool.map(lambda _: seed_new_store(_uri(db), db.parent), range(8)))
    assert seeded.count(True) == 1  # the others found it there: never a second copy over the first
    assert _schema(db) == _schema(tmp_path / "warm.db")
    assert not list(db.parent.glob(".*partial"))


def test_a_store_copied_with_its_study_folder_keeps_its_artifacts_in_the_copy(cache, tmp_path):
    """`Tracker` on a moved folder's store (`sptune.storage.follow_folder_move`): the experiment's and each run's
    artifact location point into the copy, so a resumed study logs its artifacts there; other stores' stay."""
    import shutil

    from sptune import storage

    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir()
    tracker = Tracker(_uri(old / "mlflow.db"), "moved", old)
    run = tracker.client.create_run(tracker.experiment_id)
    tracker.client.log_text(run.info.run_id, "before the move", "note.txt")
    shutil.copytree(old, new)
    shutil.rmtree(old)
    storage.set_moves({})
    storage.follow_folder_move(old, new)
    try:
        moved = Tracker(_uri(new / "mlflow.db"), "moved", new)
    finally:
        storage.set_moves({})
    assert moved.experiment_id == tracker.experiment_id
    found = moved.client.get_run(run.info.run_id)
    assert found.info.artifact_uri.startswith((new / "mlartifacts").as_uri() + "/")
    assert moved.client.get_experiment(moved.experiment_id).artifact_location == (new / "mlartifacts").as_uri()
    late = MlflowClient(tracking_uri=_uri(new / "mlflow.db")).create_run(moved.experiment_id)
    assert late.info.artifact_uri.startswith((new / "mlartifacts").as_uri() + "/")
