"""The services a study talks to: the MLflow tracking server and the Ray cluster.

Each answers within seconds here, or the study is refused: ray.init retries a head that
does not answer for many minutes, and MLflow's client retries a dead server for longer.
"""

from __future__ import annotations

import os
import socket
import urllib.error
import urllib.request

from sptune.errors import RuntimeFailure, SpecError

TIMEOUT_S = 5.0


def check_tracking_server(uri: str | None) -> None:
    """An HTTP tracking server must answer its health check (file and SQLite stores need none)."""
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


def check_storage_for_nodes(storage: str | None, alive_nodes: int) -> None:
    """Multi-node clusters need storage every node can reach; the default is local."""
    if alive_nodes > 1 and storage is None:
        raise SpecError(
            "--storage",
            f"the cluster has {alive_nodes} nodes but results would go to a local directory of this machine",
            "pass --storage pointing at shared storage (NFS path or s3://)",
        )
