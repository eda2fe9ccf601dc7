"""What the Optuna-storage tests share (tests/tracking/test_optuna_studies.py without Ray,
tests/e2e/test_optuna_storage.py with whole studies): the spec they plan or run, and a real PostgreSQL server
whose URL holds a password."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import optuna
import pytest

from tests.helpers_cluster import free_port

PASSWORD = "pg-Secret-7f3a91"
SPEC_NAME = "digits_quick"
DONE = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL, optuna.trial.TrialState.PRUNED)


def spec_path(repo_root: str) -> str:
    return str(Path(repo_root) / "search_spaces" / f"{SPEC_NAME}.yaml")


def _pg_bin() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    return versions[-1].parent if versions else None


class Postgres:
    """A PostgreSQL server's data folder and how to start and stop it (`postgres_server` makes one)."""

    def __init__(self, root: Path, bin_dir: Path, port: int, as_user: list[str]) -> None:
        self.root, self.bin_dir, self.port, self.as_user = root, bin_dir, port, as_user
        self.url = f"postgresql://sptune:{PASSWORD}@127.0.0.1:{port}/postgres"

    def pg(self, *cmd: str) -> None:
        subprocess.run([*self.as_user, *cmd], check=True, capture_output=True, timeout=120)

    def start(self) -> None:
        self.pg(str(self.bin_dir / "pg_ctl"), "-D", str(self.root / "data"), "-l", str(self.root / "log"), "-w",
                "-o", f"-k {self.root} -h 127.0.0.1 -p {self.port}", "start")

    def stop(self) -> None:
        """Fast shutdown: open connections are cut, as a crash or a failover cuts them."""
        self.pg(str(self.bin_dir / "pg_ctl"), "-D", str(self.root / "data"), "-m", "fast", "stop")


@contextmanager
def postgres_server() -> Iterator[Postgres]:
    """A real PostgreSQL server on 127.0.0.1 with password (SCRAM) login (its `url` holds the password), running.
    Skips the test where the server binaries are not installed."""
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
    server = Postgres(root, bin_dir, free_port(), as_user)
    server.pg(str(bin_dir / "initdb"), "-D", str(root / "data"), "--username", "sptune", "--pwfile",
              str(root / "pw"), "--auth", "scram-sha-256", "-E", "UTF8")
    server.start()
    try:
        yield server
    finally:
        try:
            server.stop()
        except subprocess.CalledProcessError:  # a test stopped it already
            pass
        shutil.rmtree(root, ignore_errors=True)
