"""``--storage``: a local path or any pyarrow filesystem URI (``s3://bucket/prefix``, ``gs://…``).

What lives under a remote prefix, and why:

- **Tune's experiment** (``STORAGE/study``: its state and every trial's checkpoints): Ray writes it there
  itself and restores it from there.
- **Selected checkpoints** are recorded as URIs under the storage (`checkpoint_uri`), query string kept
  (``?endpoint_override=HOST:PORT&scheme=http``), so a finetune trial on any node, the one test
  evaluation and the MLflow copy of the selected checkpoint read them through pyarrow wherever they run
  (`read_bytes`, `local_copy`); nothing assumes a shared local path.
- **The driver's files** (`output_files.DRIVER_FILES`: study_state.json at every save, spec.yaml, optuna.json,
  test_reads.jsonl, and at the end results.json/.md and report.html) are copied under the prefix as they
  are written (`DriverFileMirror`). The default Optuna database (OUTPUT/optuna.db) goes, as a consistent SQLite
  backup, into the zip of each of Tune's experiment snapshots (`sptune.study.snapshot`), taken in the
  driver step that saves the searchers. Once the Tuner has ended, the database itself is copied to
  STORAGE/optuna.db.
- **Resume from the storage alone**: ``--resume --storage URI --output NEW_DIR`` on a machine without the
  old output directory fetches those files into NEW_DIR first (preflight), then resumes as usual. The
  MLflow tracking store must outlive the old output directory as well: a study tracked in the default
  OUTPUT/mlflow.db cannot be resumed from storage alone (refused before anything starts), so start such
  studies with ``--tracking-uri`` of a server or of a SQLite file elsewhere.
- **A moved study folder** (copied to a bigger disk, ``--resume --output NEW``): what the study recorded as an
  absolute path under its old folder (checkpoints, its SQLite MLflow store, trial configs pickled by Tune) is read
  under the new one (`follow_folder_move`, `relocated`); the trials get the same moves (`set_moves`).
- **MLflow artifacts**: a new experiment's artifact location is ``STORAGE/mlflow-artifacts`` (without the
  query: MLflow's S3 client reads its endpoint from ``MLFLOW_S3_ENDPOINT_URL``, set from the URI's
  endpoint when absent).
- **Credentials** come only from the environment (``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
  ``AWS_SESSION_TOKEN``; endpoints from ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL`` or the URI's
  ``endpoint_override``): the URI is printed and saved (study_state.json, Tune's files), so one that
  carries a key is refused (`credentials_in`).

Only pyarrow here (Ray's own filesystem layer), never boto3: the same code reads any filesystem pyarrow has.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pyarrow.fs as pafs

from sptune.output_files import DRIVER_FILES, OPTUNA_DB

MLFLOW_ARTIFACTS = "mlflow-artifacts"
# Old study folder -> the folder it was copied to, in this process (a trial's: what its driver passed on).
_MOVES: dict[str, str] = {}
# How an absolute path appears in what a study records: as itself, as a file URI, in a SQLite URL.
_PATH_PREFIXES = ("", "file://", "sqlite:///")
_SECRET_KEYS = ("access_key", "secret_key", "session_token")


def is_remote(uri: str | os.PathLike | None) -> bool:
    """A URI other than file://: reached through pyarrow, not as a local path."""
    text = str(uri) if uri is not None else ""
    return "://" in text and not text.startswith("file://")


def join(uri: str, *parts: str) -> str:
    """``uri/part/...``, the query string (endpoint options) kept at the end."""
    if "://" not in uri:
        return str(Path(uri, *parts))
    base, sep, query = uri.partition("?")
    return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts if p.strip("/"))]) + sep + query


def without_query(uri: str) -> str:
    return uri.partition("?")[0]


def filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """(filesystem, path on it) of a URI or local path."""
    if "://" in uri:
        return pafs.FileSystem.from_uri(uri)
    return pafs.LocalFileSystem(), str(Path(uri).resolve())


def exists(uri: str) -> bool:
    fs, path = filesystem(uri)
    return fs.get_file_info(path).type != pafs.FileType.NotFound


def read_bytes(uri: str) -> bytes:
    fs, path = filesystem(uri)
    with fs.open_input_stream(path) as f:
        return f.read()


def write_bytes(uri: str, data: bytes) -> None:
    fs, path = filesystem(uri)
    with fs.open_output_stream(path) as f:
        f.write(data)


def write_atomically(uri: str, data: bytes) -> None:
    """Readers see the old bytes or the new ones, never a torn file: locally a rename; on an object
    store a single PUT (the object appears when its upload completes)."""
    if is_remote(uri):
        write_bytes(uri, data)
        return
    path = Path(uri)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def list_names(uri: str) -> list[str]:
    """The names of the files directly under a folder (empty when it does not exist)."""
    fs, path = filesystem(uri)
    infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    return [info.base_name for info in infos if info.type == pafs.FileType.File]


def delete_file(uri: str) -> None:
    fs, path = filesystem(uri)
    fs.delete_file(path)


def checkpoint_uri(storage: str, fs_path: str) -> str:
    """The URI of a path Ray reports on the storage's filesystem (which drops scheme and query);
    a local storage's paths are already local paths."""
    if not is_remote(storage):
        return fs_path
    base = filesystem(storage)[1].rstrip("/")
    if not fs_path.startswith(base + "/"):
        raise ValueError(f"{fs_path} is not under the storage {without_query(storage)}")
    return join(storage, fs_path[len(base) + 1 :])


@contextmanager
def local_copy(uri: str) -> Iterator[Path]:
    """A local directory holding the checkpoint at ``uri`` (itself when it is local)."""
    if not is_remote(uri):
        yield Path(relocated(uri))  # recorded before the study's folder moved: read under its copy
        return
    fs, path = filesystem(uri)
    with tempfile.TemporaryDirectory(prefix="sptune-checkpoint-") as tmp:
        pafs.copy_files(path, tmp, source_filesystem=fs, destination_filesystem=pafs.LocalFileSystem())
        yield Path(tmp)


def copy_dir_to_local(uri: str, target: Path) -> None:
    """A checkpoint folder (local or remote) copied into ``target`` (which must not exist)."""
    with local_copy(uri) as folder:
        shutil.copytree(folder, target)


def credentials_in(uri: str) -> bool:
    """Whether the URI carries a key (``user:secret@`` or ``?secret_key=``): it would be printed and saved."""
    parts = urlsplit(uri)
    return "@" in parts.netloc or any(key in parse_qs(parts.query) for key in _SECRET_KEYS)


def endpoint(uri: str) -> str | None:
    """The S3-compatible endpoint a URI talks to (``scheme://host:port``); None: the provider's default."""
    parts = urlsplit(uri)
    if parts.scheme != "s3":
        return None
    query = parse_qs(parts.query)
    if "endpoint_override" in query:
        found = query["endpoint_override"][0]
        return found if "://" in found else f"{query.get('scheme', ['https'])[0]}://{found}"
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None


def mlflow_artifact_root(storage: str) -> str:
    """Where MLflow keeps a new experiment's artifacts under a remote storage. MLflow's own S3 client
    takes no query string: the endpoint goes to ``MLFLOW_S3_ENDPOINT_URL`` (left alone when set)."""
    found = endpoint(storage)
    if found:
        os.environ.setdefault("MLFLOW_S3_ENDPOINT_URL", found)
    return join(without_query(storage), MLFLOW_ARTIFACTS)


class DriverFileMirror:
    """The driver's files of one study, copied under a remote storage prefix (a no-op for local storage)."""

    def __init__(self, storage: str | None, output_dir: Path) -> None:
        self.storage = storage if is_remote(storage) else None
        self.out = output_dir

    def push(self, *names: str) -> None:
        if self.storage is None:
            return
        for name in names:
            path = self.out / name
            if path.is_file():
                write_bytes(join(self.storage, name), path.read_bytes())

    def push_bytes(self, name: str, data: bytes) -> None:
        if self.storage is not None:
            write_bytes(join(self.storage, name), data)

    def pull(self) -> list[str]:
        """Fetch the driver's files the storage holds into the output directory (the Optuna database if
        the Tuner ended and copied it; `sptune.study.snapshot` keeps an earlier copy); returns the names fetched."""
        if self.storage is None:
            return []
        fetched = []
        for name in (*DRIVER_FILES, OPTUNA_DB):
            uri = join(self.storage, name)
            if exists(uri):
                self.out.mkdir(parents=True, exist_ok=True)
                (self.out / name).write_bytes(read_bytes(uri))
                fetched.append(name)
        return fetched


def follow_folder_move(old: Path, new: Path) -> None:
    """The study that ran in `old` goes on in `new` (its copy): `relocated` maps what it recorded there."""
    old_text, new_text = str(old.resolve()), str(new.resolve())
    if old_text != new_text:
        _MOVES[old_text] = new_text


def moves() -> dict[str, str]:
    """This process's folder moves, for its trials (`set_moves`)."""
    return dict(_MOVES)


def set_moves(found: dict[str, str]) -> None:
    """A trial's process: the moves of the driver that runs it, in place of any earlier driver's."""
    _MOVES.clear()
    _MOVES.update(found)


def relocated(text: str) -> str:
    """A path, file URI or SQLite URL under a moved folder, under its copy instead; anything else unchanged."""
    for old, new in _MOVES.items():
        for prefix in _PATH_PREFIXES:
            head = prefix + old
            if text == head or text.startswith(head + "/"):
                return prefix + new + text[len(head):]
    return text


def relocated_tree(value: Any) -> Any:
    """`relocated` applied to every string in JSON-like data (dicts, lists, strings)."""
    if isinstance(value, str):
        return relocated(value)
    if isinstance(value, dict):
        return {k: relocated_tree(v) for k, v in value.items()}
    if isinstance(value, list):
        return [relocated_tree(v) for v in value]
    return value
