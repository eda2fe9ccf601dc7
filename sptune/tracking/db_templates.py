"""New SQLite databases copied from an empty one made once, rather than built table by table.

MLflow and Optuna build a new SQLite store by running their schema set-up, on the critical path of
each study's start (every study has its own `mlflow.db` and `optuna.db`; docs/design/tracking.md).
The empty database this leaves is the same each time for one schema, so it is made once under the
cache root (`sptune.tasks.cache.cache_root`, `stores/KEY.db`, the key naming the library's version and
its schema files) and copied. Each library still checks a copy's schema version when it opens it; what
a copy must not share with the template (`adjust`) is set on the copy before it is put in place.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path

from sptune.tasks.cache import cache_root

SQLITE_PREFIX = "sqlite:///"


def sqlite_path(uri: str) -> Path | None:
    """The file of a `sqlite:///` URI (None for any other database)."""
    return Path(uri.removeprefix(SQLITE_PREFIX)) if uri.startswith(SQLITE_PREFIX) else None


def schema_key(library: str, version: str, schema_files: Iterable[Path]) -> str:
    """A template's name: the library, its version and the names of its schema files (a new
    migration, a new key)."""
    names = "\n".join(sorted(p.name for p in schema_files))
    return f"{library}-{version}-{hashlib.sha256(names.encode()).hexdigest()[:12]}"


def seed(
    path: Path, key: str, make_empty: Callable[[Path], None], adjust: Callable[[Path], None] | None = None
) -> bool:
    """Put a copy of template `key` (made by `make_empty` on first use) at `path` if no file is there;
    True if it did. An existing database (a resumed study, a shared file) is never touched. False also
    where a copy cannot be made (a file system without hard links, an unwritable cache, a template the
    library failed to make): the library then builds the database itself, and reports what fails."""
    if path.exists() or not path.parent.is_dir():
        return False
    try:
        handle, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
    except OSError:
        return False
    os.close(handle)
    partial = Path(name)  # a name of its own: threads and processes seeding at once never share one
    try:
        _copy_template(partial, key, make_empty, adjust)
        os.link(partial, path)  # never over a database another process made meanwhile
    except Exception:  # noqa: BLE001 - a shortcut only: whatever stops it, the library builds the database
        return False
    finally:
        partial.unlink(missing_ok=True)
    return True


def _copy_template(
    dest: Path, key: str, make_empty: Callable[[Path], None], adjust: Callable[[Path], None] | None
) -> None:
    """The template, adjusted, at `dest`; a template that is not a readable database (a disk that
    filled while it was written, say) is made again, once."""
    for attempt in (1, 2):
        template = _template(key, make_empty)
        shutil.copyfile(template, dest)
        try:
            _check(dest)
            if adjust is not None:
                adjust(dest)
            return
        except sqlite3.DatabaseError:
            template.unlink(missing_ok=True)
            if attempt == 2:
                raise


def _check(db: Path) -> None:
    """Raises sqlite3.DatabaseError unless `db` is a database SQLite finds intact."""
    with sqlite3.connect(db) as conn:
        (result,) = conn.execute("PRAGMA quick_check").fetchone()
    conn.close()
    if result != "ok":
        raise sqlite3.DatabaseError(f"{db}: {result}")


def _template(key: str, make_empty: Callable[[Path], None]) -> Path:
    """The template, made on first use (atomically: concurrent studies each make one, the first
    rename wins, and none ever sees half of one)."""
    final = cache_root() / "stores" / f"{key}.db"
    if final.is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".store-", dir=final.parent))
    try:
        make_empty(tmp / "empty.db")
        os.replace(tmp / "empty.db", final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final
