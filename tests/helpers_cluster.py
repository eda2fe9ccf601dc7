"""Real Ray nodes (`ray start`) and a real `mlflow server` for tests/test_cluster.py.

Every process gets its own temp dir and ports on this machine, and is stopped by PID
only. Never `ray stop` here: it kills every Ray process on the machine, other people's too.
"""

from __future__ import annotations

import http.client
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def write_token(path: Path) -> str:
    """A cluster token of the kind `ray get-auth-token --generate` makes, in our own file."""
    token = secrets.token_hex(32)
    path.write_text(token)
    path.chmod(0o600)
    return token


def cluster_env(token_path: Path, repo_root: str) -> dict[str, str]:
    """Environment for `ray start`, clients and `ray job submit`: token auth, our token file,
    and nothing that points at another Ray instance."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS"))}
    env.update({
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN_PATH": str(token_path),
        "RAY_USAGE_STATS_ENABLED": "0",
        "PYTHONPATH": repo_root,
    })
    return env


# ---------------------------------------------------------------- processes, by PID


def _processes() -> dict[int, tuple[int, str]]:
    """pid -> (ppid, command line) of every process, from /proc."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read().decode(errors="replace")
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        found[int(entry)] = (ppid, cmd)
    return found


Pattern = tuple[str, ...]  # a process matches when its command line contains every string


def matching_pids(patterns: list[Pattern]) -> set[int]:
    """Processes whose command line matches one of ``patterns``, plus all their descendants
    (Ray workers rename themselves to ``ray::...`` and lose their arguments)."""
    procs = _processes()
    me = os.getpid()
    roots = {pid for pid, (_, cmd) in procs.items()
             if pid != me and any(all(part in cmd for part in p) for p in patterns)}
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid in found or pid == me:
            continue
        found.add(pid)
        todo.extend(children.get(pid, []))
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def terminate(pids: set[int], grace_s: float = 5.0) -> set[int]:
    """SIGTERM, wait up to ``grace_s``, then SIGKILL; returns the PIDs still alive after that."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.time() + grace_s
        while time.time() < deadline and any(_alive(p) for p in pids):
            time.sleep(0.1)
        pids = {p for p in pids if _alive(p)}
        if not pids:
            break
    return pids


def stop_matching(patterns: list[Pattern], rounds: int = 3) -> set[int]:
    """Stop everything matching ``patterns`` (and descendants), rescanning for processes
    started meanwhile (a raylet restarts workers). Returns what could not be stopped."""
    left: set[int] = set()
    for _ in range(rounds):
        pids = matching_pids(patterns)
        if not pids:
            return set()
        left = terminate(pids)
    return left | matching_pids(patterns)


# ---------------------------------------------------------------- HTTP with the cluster token


def http_json(url: str, token: str | None = None, timeout: float = 10.0) -> dict:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


# A server's first start in a new virtualenv also compiles its imports (moto, MLflow, Ray's dashboard): a minute on
# a small machine, where a warm start takes seconds.
START_TIMEOUT_S = 120.0

# What a client raises while its server is not listening yet or not ready: a refused or reset connection (OSError,
# URLError, HTTPError), a reply cut short (HTTPException), a body that is not yet the JSON asked for (ValueError).
NOT_READY: tuple[type[Exception], ...] = (OSError, urllib.error.URLError, http.client.HTTPException, ValueError)


def wait_for(check: Callable[[], Any], timeout_s: float, what: str, interval: float = 0.25,
             retry: tuple[type[Exception], ...] = NOT_READY, server: subprocess.Popen | None = None,
             log: Path | None = None) -> Any:
    """``check()``'s first true value, retrying the errors in ``retry`` until ``timeout_s``. With ``server`` (the
    process that should answer), its exit ends the wait at once, with the tail of ``log``."""
    deadline = time.time() + timeout_s
    last: Exception | None = None
    while time.time() < deadline:
        if server is not None and server.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:] if log is not None and log.is_file() else ""
            raise RuntimeError(f"{what} exited ({server.returncode}) before it was ready:\n{tail}")
        try:
            value = check()
            if value:
                return value
        except retry as err:
            last = err
        time.sleep(interval)
    raise TimeoutError(f"{what} not ready after {timeout_s:.0f}s (last error: {type(last).__name__}: {last})")


# ---------------------------------------------------------------- Ray nodes


@dataclass
class RayHead:
    root: Path  # this cluster's private temp root: every node's --temp-dir lives under it
    token: str
    env: dict[str, str]
    gcs_port: int = field(default_factory=free_port)
    dashboard_port: int = field(default_factory=free_port)
    client_port: int = field(default_factory=free_port)
    agent_port: int = field(default_factory=free_port)
    command_seconds: float = 0.0  # until `ray start --head` returned
    start_seconds: float = 0.0  # until the dashboard's job API answered
    log: str = ""

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.gcs_port}"

    @property
    def dashboard(self) -> str:
        return f"http://{LOOPBACK}:{self.dashboard_port}"

    def command(self, num_cpus: int) -> list[str]:
        return [
            "ray", "start", "--head",
            "--node-ip-address", LOOPBACK,
            "--port", str(self.gcs_port),
            "--dashboard-host", LOOPBACK, "--dashboard-port", str(self.dashboard_port),
            # Fixed defaults (10001, 52365) would collide with other Ray instances on this machine.
            "--ray-client-server-port", str(self.client_port),
            "--dashboard-agent-listen-port", str(self.agent_port),
            "--num-cpus", str(num_cpus),
            "--object-store-memory", str(200 * 1024**2),
            "--temp-dir", str(self.root / "h"),
            "--disable-usage-stats",
        ]

    def start(self, num_cpus: int = 2, timeout_s: float = START_TIMEOUT_S) -> float:
        t0 = time.time()
        proc = subprocess.run(self.command(num_cpus), env=self.env, capture_output=True, text=True,
                              timeout=timeout_s)
        self.log = proc.stdout + proc.stderr
        if proc.returncode != 0:
            raise RuntimeError(f"ray start --head failed ({proc.returncode}):\n{self.log[-3000:]}")
        self.command_seconds = time.time() - t0
        # `ray start` returns once the node runs; the job API can take a moment longer.
        wait_for(lambda: http_json(f"{self.dashboard}/api/version", self.token), START_TIMEOUT_S, "Ray dashboard")
        self.start_seconds = time.time() - t0
        return self.start_seconds

    def nodes(self) -> list[dict]:
        data = http_json(f"{self.dashboard}/api/v0/nodes?limit=100&detail=1", self.token)
        return [n for n in data["data"]["result"]["result"] if n["state"] == "ALIVE"]

    def actors(self) -> list[dict]:
        data = http_json(f"{self.dashboard}/api/v0/actors?limit=10000&detail=1", self.token)
        return data["data"]["result"]["result"]

    def job(self, submission_id: str) -> dict:
        return http_json(f"{self.dashboard}/api/jobs/{submission_id}", self.token)

    def patterns(self) -> list[Pattern]:
        # Every node process names its --temp-dir (all under our root); the Ray client server
        # only names the GCS port.
        return [(f"{self.root}/h/",), (f"{self.root}/w/",),
                ("ray.util.client.server", f":{self.gcs_port} ", f"--port={self.client_port}")]

    def stop(self) -> set[int]:
        return stop_matching(self.patterns())


def start_worker(head: RayHead, num_cpus: int = 1, timeout_s: float = START_TIMEOUT_S) -> tuple[float, Path]:
    """A second node on this machine: `ray start --address HEAD`; returns (seconds, its temp dir)."""
    temp = head.root / "w"
    t0 = time.time()
    cmd = ["ray", "start", "--address", head.address, "--node-ip-address", LOOPBACK,
           "--num-cpus", str(num_cpus), "--object-store-memory", str(100 * 1024**2),
           "--dashboard-agent-listen-port", str(free_port()),
           "--temp-dir", str(temp), "--disable-usage-stats"]
    proc = subprocess.run(cmd, env=head.env, capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"ray start --address failed ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    wait_for(lambda: len(head.nodes()) >= 2, START_TIMEOUT_S, "second Ray node")
    return time.time() - t0, temp


def available_memory_gib() -> float:
    with open("/proc/meminfo") as f:
        info = dict(line.split(":", 1) for line in f)
    return int(info["MemAvailable"].split()[0]) / 1024**2


# ---------------------------------------------------------------- MLflow server


@dataclass
class MlflowServer:
    root: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None

    @property
    def uri(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def command(self) -> list[str]:
        return [
            sys.executable, "-m", "mlflow", "server", "--host", LOOPBACK, "--port", str(self.port), "--workers", "1",
            "--backend-store-uri", f"sqlite:///{self.root / 'mlflow.db'}",
            # Clients upload artifacts through the server (mlflow-artifacts:/), so trials'
            # machines need no access to this directory.
            "--serve-artifacts", "--artifacts-destination", str(self.root / "artifacts"),
        ]

    def launch(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        with open(self.root / "server.log", "wb") as log:
            self.proc = subprocess.Popen(self.command(), env=env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True, cwd=self.root)

    def wait(self, timeout_s: float = START_TIMEOUT_S) -> None:
        def up() -> bool:
            with urllib.request.urlopen(f"{self.uri}/health", timeout=2):
                return True

        wait_for(up, timeout_s, "mlflow server", server=self.proc, log=self.root / "server.log")

    def stop(self) -> set[int]:
        if self.proc is None:
            return set()
        # `mlflow server` runs uvicorn as a child in the session it was started in.
        pids = {p for p in _session_members(self.proc.pid) | {self.proc.pid} if _alive(p)}
        left = terminate(pids)
        self.proc.wait(timeout=10)
        return left


def _session_members(sid: int) -> set[int]:
    """Processes of the session the server was started in (start_new_session=True)."""
    members = set()
    for pid in _processes():
        try:
            if os.getsid(pid) == sid:
                members.add(pid)
        except OSError:
            pass
    return members
