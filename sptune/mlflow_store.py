"""A new study's SQLite MLflow store, copied from an empty store made once per MLflow schema.

MLflow creates a SQLite store by running every one of its schema migrations: ~1.7 s of the
driver's CPU (69 migrations in MLflow 3.17), on the critical path of each study's start, since
every study has a store of its own in its output directory. The empty store this leaves is the same
each time for one set of migrations, so sptune makes it once, under the cache root
(`sptune.tasks.cache.cache_root`, keyed by MLflow's version and its migration files), and copies it.

What a copy does not share with the template is set as a new store would have it: the Default
experiment's creation time, and its artifact location, which sptune pins inside the output
directory (as it does for the study's own experiment) instead of MLflow's `./mlruns` of whatever
the current directory was. MLflow still checks the copy's schema revision when it opens it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path

SQLITE_PREFIX = "sqlite:///"


def sqlite_path(uri: str) -> Path | None:
    """The file of a `sqlite:///` tracking URI (None for any other store)."""
    return Path(uri.removeprefix(SQLITE_PREFIX)) if uri.startswith(SQLITE_PREFIX) else None


def seed_new_store(uri: str, artifact_root: Path) -> bool:
    """Put an empty store at `uri`'s file if it is a SQLite store that does not exist yet; True if it
    did. An existing store (a resumed study, a shared file) is never touched. False also where the
    copy cannot be made (a file system without hard links, say): MLflow then creates the store."""
    path = sqlite_path(uri)
    if path is None or path.exists() or not path.parent.is_dir():
        return False
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    try:
        _copy_template(partial, artifact_root)
        os.link(partial, path)  # never over a store another process made meanwhile
    except (OSError, sqlite3.Error):
        return False
    finally:
        partial.unlink(missing_ok=True)
    return True


def _copy_template(dest: Path, artifact_root: Path) -> None:
    """The template, as a new store, at `dest`; a template that is not a readable store (a disk
    that filled while it was written, say) is made again, once."""
    for attempt in (1, 2):
        template = _template()
        shutil.copyfile(template, dest)
        try:
            _as_new(dest, artifact_root)
            return
        except sqlite3.DatabaseError:
            template.unlink(missing_ok=True)
            if attempt == 2:
                raise


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


def _template() -> Path:
    """The empty store for this MLflow's migrations, made on first use (atomically: concurrent
    studies each make one, the first rename wins, and none ever sees half of one)."""
    from sptune.tasks.cache import cache_root

    final = cache_root() / "mlflow-stores" / f"{_schema_key()}.db"
    if final.is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".store-", dir=final.parent))
    try:
        _create_empty_store(tmp / "mlflow.db")
        os.replace(tmp / "mlflow.db", final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _create_empty_store(db: Path) -> None:
    """A store as MLflow creates it, every migration run."""
    from mlflow.tracking import MlflowClient

    MlflowClient(tracking_uri=f"{SQLITE_PREFIX}{db}").search_experiments()  # the first call creates the tables


def _schema_key() -> str:
    """MLflow's version and the names of its migration files: a new migration makes a new key."""
    import mlflow

    versions = Path(mlflow.__file__).parent / "store" / "db_migrations" / "versions"
    names = sorted(p.name for p in versions.glob("*.py"))
    digest = hashlib.sha256("\n".join(names).encode()).hexdigest()[:12]
    return f"mlflow-{mlflow.__version__}-{digest}"
