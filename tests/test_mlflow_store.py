"""A new study's SQLite MLflow store is a copy of an empty store made once (sptune.mlflow_store):
it must be the store MLflow would have made, and an existing store must never be touched."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from sptune.mlflow_store import seed_new_store
from sptune.tracking import Tracker


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("SPTUNE_CACHE_DIR", str(root))
    return root


def _uri(path: Path) -> str:
    return f"sqlite:///{path}"


def _schema(db: Path) -> tuple[list[str], list[tuple]]:
    """The revision and every table's columns: what MLflow's migrations leave."""
    with sqlite3.connect(db) as conn:
        revision = [r[0] for r in conn.execute("SELECT version_num FROM alembic_version")]
        tables = sorted(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"))
        columns = [(t, c[1], c[2]) for t in tables for c in conn.execute(f'PRAGMA table_info("{t}")')]
    conn.close()
    return revision, columns


def _template(cache: Path) -> Path:
    (template,) = (cache / "mlflow-stores").glob("*.db")
    return template


def test_a_seeded_store_is_the_store_mlflow_makes(tmp_path, cache):
    fresh = tmp_path / "fresh.db"
    MlflowClient(tracking_uri=_uri(fresh)).search_experiments()  # MLflow runs its migrations itself
    seeded = tmp_path / "out" / "mlflow.db"
    seeded.parent.mkdir()

    assert seed_new_store(_uri(seeded), tmp_path / "out" / "mlartifacts")
    assert _schema(seeded) == _schema(fresh)
    default = MlflowClient(tracking_uri=_uri(seeded)).get_experiment("0")
    assert default.name == "Default" and default.lifecycle_stage == "active"
    # Pinned inside the output directory, as sptune pins the study's own experiment, not ./mlruns.
    assert default.artifact_location == (tmp_path / "out" / "mlartifacts" / "0").resolve().as_uri()
    assert default.creation_time > MlflowClient(tracking_uri=_uri(fresh)).get_experiment("0").creation_time - 1


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
    assert not (cache / "mlflow-stores").exists()  # nothing made for them


def test_an_unreadable_template_is_made_again(tmp_path, cache):
    (tmp_path / "a").mkdir()
    assert seed_new_store(_uri(tmp_path / "a" / "mlflow.db"), tmp_path / "a")
    _template(cache).write_bytes(b"not a database: a disk filled while it was written")

    (tmp_path / "b").mkdir()
    assert seed_new_store(_uri(tmp_path / "b" / "mlflow.db"), tmp_path / "b")
    assert _schema(tmp_path / "b" / "mlflow.db") == _schema(tmp_path / "a" / "mlflow.db")
    assert _template(cache).read_bytes().startswith(b"SQLite format 3")
    assert not list((tmp_path / "b").glob(".*partial"))  # no partial copy left behind
