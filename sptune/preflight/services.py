"""The services a study talks to: the MLflow tracking server, the Optuna database, a remote --storage
and the Ray cluster.

Each answers within seconds here, or the study is refused: ray.init retries a head that
does not answer for many minutes, and MLflow's client retries a dead server for longer.
"""

from __future__ import annotations

import os
import socket
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pyarrow.fs as pafs
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, SQLAlchemyError

from sptune import storage as stored
from sptune.errors import RuntimeFailure, SpecError
from sptune.spec.tracking_uri import FIX as TRACKING_FIX
from sptune.spec.tracking_uri import tracking_uri_problem
from sptune.tracking.optuna_studies import redact

TIMEOUT_S = 5.0


def check_tracking_server(uri: str | None) -> None:
    """A scheme MLflow knows, and an HTTP tracking server must answer its health check (file and SQLite stores
    need none)."""
    found = tracking_uri_problem(uri) if uri else None
    if found:
        raise SpecError(f"--tracking-uri {uri}", found, TRACKING_FIX)
    if not uri or not uri.startswith(("http://", "https://")):
        return
    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=TIMEOUT_S):
            return
    except (urllib.error.URLError, OSError) as err:
        raise RuntimeFailure(
            f"--tracking-uri {uri}",
            f"MLflow tracking server is not reachable ({getattr(err, 'reason', err)})",
            "start it with `mlflow server --host 127.0.0.1 --port 5000 --backend-store-uri sqlite:///mlflow.db` "
            "or drop --tracking-uri to use the embedded SQLite store",
        ) from err


def ray_address(explicit: str | None) -> str | None:
    """--address wins, then RAY_ADDRESS; None means a local Ray instance."""
    return explicit or os.environ.get("RAY_ADDRESS") or None


def check_ray_head(address: str) -> None:
    """A Ray head must accept a TCP connection at HOST:PORT ('auto' and 'local' are Ray's own)."""
    if address in ("auto", "local"):
        return
    host, _, port = address.split("://", 1)[-1].rpartition(":")
    if not host or not port.isdigit():
        raise SpecError("--address", f"'{address}' is not HOST:PORT", "pass the head's GCS address, e.g. 10.0.0.5:6379")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=TIMEOUT_S):
            pass
    except OSError as err:
        raise RuntimeFailure(
            f"--address {address}",
            f"no Ray head answers there ({err.strerror or type(err).__name__})",
            "start one with `ray start --head --port PORT` and pass the address it prints, or drop --address "
            "(and RAY_ADDRESS) to run on a local Ray instance",
        ) from None


_STORAGE_ENV = (
    "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_ENDPOINT_URL, or ?endpoint_override=HOST:PORT"
    "&scheme=http in the URI, for an S3-compatible server) in the environment of the driver and of every node"
)


def check_storage(uri: str | None) -> None:
    """A remote --storage (any pyarrow URI): no credentials in it (it is printed and saved), its endpoint
    answers within seconds (pyarrow's client retries a dead one for longer), its bucket exists and the
    prefix can be listed. Refused with exit 2 before anything starts."""
    if not stored.is_remote(uri):
        return
    if stored.credentials_in(uri):  # never echo the URI: it holds the secret
        raise SpecError("--storage", "the URI carries credentials, which would be printed and saved with it",
                        f"remove them from the URI and {_STORAGE_ENV}")
    shown = stored.without_query(uri)
    endpoint = stored.endpoint(uri)
    if endpoint:
        _check_endpoint(shown, endpoint)
    try:
        fs, path = stored.filesystem(uri)
        bucket = path.split("/", 1)[0]
        if fs.get_file_info(bucket).type == pafs.FileType.NotFound:
            raise SpecError(f"--storage {shown}", f"the bucket '{bucket}' does not exist",
                            "create it (e.g. `aws s3 mb s3://BUCKET`) or name an existing one")
        fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))  # may we list the prefix?
    except (OSError, ValueError) as err:
        reason = str(err).strip().splitlines()[0][:300] if str(err).strip() else type(err).__name__
        raise SpecError(f"--storage {shown}", f"the storage cannot be read ({reason})",
                        f"check the bucket and prefix, and {_STORAGE_ENV}") from None


def _check_endpoint(shown: str, endpoint: str) -> None:
    parts = urlsplit(endpoint)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((parts.hostname or "", port), timeout=TIMEOUT_S):
            return
    except OSError as err:
        raise SpecError(
            f"--storage {shown}",
            f"its endpoint {endpoint} does not answer ({err.strerror or type(err).__name__})",
            "start the S3-compatible server, or fix ?endpoint_override= in the URI or AWS_ENDPOINT_URL",
        ) from None


def check_storage_for_nodes(storage: str | None, alive_nodes: int) -> None:
    """Multi-node clusters need storage every node can reach; the default is local."""
    if alive_nodes > 1 and storage is None:
        raise SpecError(
            "--storage",
            f"the cluster has {alive_nodes} nodes but results would go to a local directory of this machine",
            "pass --storage pointing at shared storage (NFS path or s3://)",
        )


def check_optuna_storage(url: str, study: str, resume: bool) -> None:
    """--optuna-storage: a database URL, a database that answers within seconds, and for a new
    study none of its Optuna study names (STUDY/...) already taken by an earlier run, whose trials
    a new search would otherwise silently continue. The password is never shown."""
    where = f"--optuna-storage {redact(url)}"
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise SpecError(where, "this is not a database URL",
                        "pass e.g. postgresql://USER@HOST:5432/DB or sqlite:////ABSOLUTE/PATH/optuna.db") from None
    if parsed.get_backend_name() == "sqlite" and not _sqlite_file(where, parsed.database):
        return  # a new SQLite file: nothing to reach, nothing taken
    taken = [name for name in _study_names(where, url, parsed) if name.startswith(f"{study}/")]
    if taken and not resume:
        raise SpecError(
            where, f"it already holds Optuna studies of a study named '{study}' ({', '.join(sorted(taken))}): "
            "a new study would continue their searches",
            "pass --set name=NEW_NAME, use another database, or --resume --output DIR to continue that study",
        )


def _sqlite_file(where: str, database: str | None) -> bool:
    """Whether the SQLite file exists; refused: in-memory (the searches would be lost), no such directory."""
    if not database or database == ":memory:":
        raise SpecError(where, "an in-memory SQLite database keeps nothing after the study",
                        "name a file, e.g. sqlite:////ABSOLUTE/PATH/optuna.db, or drop --optuna-storage")
    path = Path(database)
    if not path.parent.is_dir():
        raise SpecError(where, f"the directory {path.parent} does not exist", "create it or name another file")
    return path.exists()


def _study_names(where: str, url: str, parsed: URL) -> list[str]:
    """Every Optuna study name in the database ([] before Optuna has created its tables)."""
    timeout = {"connect_timeout": int(TIMEOUT_S)} if parsed.get_backend_name() in ("postgresql", "mysql") else {}
    try:
        engine = create_engine(url, connect_args=timeout)
    except (ImportError, NoSuchModuleError) as err:
        raise SpecError(where, f"no database driver for '{parsed.drivername}' ({err})",
                        "install it, e.g. `pip install 'psycopg[binary]'` for postgresql://") from None
    try:
        with engine.connect() as conn:
            if not inspect(conn).has_table("studies"):
                return []
            return [row[0] for row in conn.execute(text("SELECT study_name FROM studies"))]
    except SQLAlchemyError as err:
        reason = str(getattr(err, "orig", None) or err).strip().splitlines()[0]
        if parsed.password:
            reason = reason.replace(str(parsed.password), "***")
        raise RuntimeFailure(
            where, f"the Optuna database does not answer ({reason})",
            "start it, or check the host, port, user and database in the URL (a password may also come from "
            "PGPASSWORD or ~/.pgpass), or drop --optuna-storage to keep the searches in OUTPUT/optuna.db",
        ) from None
    finally:
        engine.dispose()
