"""A new study's SQLite MLflow store, copied from an empty one (`sptune.tracking.db_templates`) rather than
built by MLflow's schema migrations for every study (docs/design/tracking.md).

What a copy does not share with the template is set as a new store would have it: the Default
experiment's creation time, and its artifact location, which sptune pins inside the output directory
(as it does for the study's own experiment) rather than MLflow's `./mlruns` of the current
directory. MLflow checks the copy's schema revision when it opens it.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import mlflow
from mlflow.tracking import MlflowClient

from sptune.tracking.db_templates import SQLITE_PREFIX, schema_key, seed, sqlite_path


def seed_new_store(uri: str, artifact_root: Path) -> bool:
    """An empty store at `uri`'s file if it is a SQLite store that does not exist yet; True if it did
    (False: MLflow creates it, as for any other store)."""
    path = sqlite_path(uri)
    if path is None:
        return False
    return seed(path, _key(), _create_empty_store, lambda db: _as_new(db, artifact_root))


def _as_new(db: Path, artifact_root: Path) -> None:
    """The Default experiment (id 0) as MLflow makes it in a new store, but with its artifacts
    inside `artifact_root` and the copy's own creation time."""
    now = int(time.time() * 1000)
    with sqlite3.connect(db) as conn:
        conn.execute(
            "UPDATE experiments SET artifact_location = ?, creation_time = ?, last_update_time = ? "
            "WHERE experiment_id = 0",
            ((artifact_root / "0").resolve().as_uri(), now, now),
        )
    conn.close()


def follow_folder_moves(uri: str, moved: dict[str, str]) -> None:
    """A SQLite store copied with its study folder (old folder -> new in `moved`): the experiments' and runs'
    artifact locations under an old folder point into the new one, so artifacts logged on resume land in the
    copy and the UI finds the earlier ones there. Artifact locations are MLflow's own columns; no client call
    changes them once set."""
    path = sqlite_path(uri)
    if path is None or not moved or not path.exists():
        return
    with sqlite3.connect(path) as conn:
        for old, new in moved.items():
            old_uri, new_uri = Path(old).as_uri(), Path(new).as_uri()
            for table, column in (("experiments", "artifact_location"), ("runs", "artifact_uri")):
                conn.execute(
                    f"UPDATE {table} SET {column} = ? || substr({column}, ?) "
                    f"WHERE {column} = ? OR substr({column}, 1, ?) = ?",
                    (new_uri, len(old_uri) + 1, old_uri, len(old_uri) + 1, old_uri + "/"),
                )
    conn.close()


def _create_empty_store(db: Path) -> None:
    """A store as MLflow creates it, every migration run."""
    MlflowClient(tracking_uri=f"{SQLITE_PREFIX}{db}").search_experiments()  # the first call creates the tables


def _key() -> str:
    migrations = Path(mlflow.__file__).parent / "store" / "db_migrations" / "versions"
    return schema_key("mlflow", mlflow.__version__, migrations.glob("*.py"))
