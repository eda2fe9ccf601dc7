"""Shared fixtures: one Ray session for the whole suite (each costs ~2 GiB and seconds).

Tests mirror the packages (`tests/<package>/test_<module>.py`); end-to-end ones live in `tests/e2e/` and are
marked `slow`, so `pytest -m "not slow"` runs the rest. Test files are imported by path (`--import-mode=importlib`,
so two packages may each have a `test_x.py`); the helpers are imported as `tests.helpers_*`.
"""

from __future__ import annotations

import faulthandler
import gc
import os
import signal
import sys
import time
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
# The repository root: `tests.helpers_*` (and a test importing another's constants) resolve under it.
if str(TESTS.parent) not in sys.path:
    sys.path.insert(0, str(TESTS.parent))

# Never wait on the Hugging Face hub in tests (it retries for ~20 s when offline).
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")


_STDERR = pytest.StashKey()


def pytest_configure(config: pytest.Config) -> None:
    # The terminal's stderr, copied while pytest's capture is suspended: the stack dumps below must reach
    # CI's log even when a captured test is the one that hangs.
    config.stash[_STDERR] = os.fdopen(os.dup(sys.stderr.fileno()), "w")


# An end-to-end test that outlives this fails with its stack instead of holding CI until its own limit
# (the slowest takes ~3 min here).
E2E_TIMEOUT_S = 600
# After this many end-to-end tests ran out of time the rest would most likely hang too: stop the run.
E2E_TIMEOUTS_BEFORE_STOP = 2
_timed_out: list[str] = []


@pytest.fixture(autouse=True)
def e2e_time_limit(request: pytest.FixtureRequest):
    if request.node.get_closest_marker("slow") is None or not hasattr(signal, "SIGALRM"):
        yield
        return
    if len(_timed_out) >= E2E_TIMEOUTS_BEFORE_STOP:
        pytest.exit(f"stopped: {len(_timed_out)} end-to-end tests ran out of time ({', '.join(_timed_out)})", 1)

    def expired(signum: int, frame: object) -> None:
        _timed_out.append(request.node.nodeid)
        # Every thread's stack: what the main thread waits on is often a helper thread.
        faulthandler.dump_traceback(file=request.config.stash[_STDERR], all_threads=True)
        raise TimeoutError(f"{request.node.nodeid} ran past {E2E_TIMEOUT_S} s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(E2E_TIMEOUT_S)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# The backstop: a test whose setup, call or teardown is stuck where the alarm's exception cannot reach it
# (a C call, a loop that catches Exception, a session fixture) dumps every thread's stack and ends the
# run, so CI prints where it hung instead of waiting out its own limit.
HARD_LIMIT_S = {"slow": E2E_TIMEOUT_S + 300, "fast": 600}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    kind = "slow" if item.get_closest_marker("slow") is not None else "fast"
    faulthandler.dump_traceback_later(HARD_LIMIT_S[kind], exit=True, file=item.config.stash[_STDERR])
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


# The heavy tier: end-to-end tests of minutes each (whole campaigns, packed studies, clusters, outages, every mini)
# whose paths the default suite also drives in smaller form. Together they would take CI past its 30 minutes, so
# they run on request: `SPTUNE_HEAVY=1 python -m pytest -q -m heavy` (not yet timed as one run).
HEAVY = os.environ.get("SPTUNE_HEAVY") == "1"
_LEFT_OUT = pytest.mark.skip(reason="heavy: SPTUNE_HEAVY=1 runs it")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    e2e = TESTS / "e2e"
    for item in items:
        heavy = item.get_closest_marker("heavy") is not None
        if heavy or e2e in Path(item.path).parents:
            item.add_marker(pytest.mark.slow)
        if heavy and not HEAVY:
            item.add_marker(_LEFT_OUT)


RAY_SESSION_CPUS = 2
RELEASE_WAIT_S = 10  # Tune stops a finished study's actors asynchronously
# CPUs still held this long with no actor alive and no placement group left are leaked: no wait returns them (a
# dead actor's CPUs reach the resource view within a second).
ORPHANED_S = 2


def _start_ray() -> None:
    """The shared session. Ray waits a fixed 30 s for its raylet to register: a first start in a new virtualenv
    (every Ray process compiling its imports) or on a loaded machine can miss that, and the second start, its
    imports warm, does not."""
    import ray

    for attempt in (1, 2):
        try:
            ray.init(num_cpus=RAY_SESSION_CPUS, include_dashboard=False, log_to_driver=False)
            return
        except Exception as err:
            if attempt == 2 or "timed out during startup" not in str(err):
                raise
            ray.shutdown()


@pytest.fixture(scope="session")
def ray_session():
    import ray

    started = not ray.is_initialized()
    if started:
        _start_ray()
    yield ray
    if started:
        ray.shutdown()


def _busy_cpus(ray) -> float:
    return ray.cluster_resources().get("CPU", 0.0) - ray.available_resources().get("CPU", 0.0)


def _holders(ray) -> int:
    """Actors not dead and placement groups not removed: what could still hand CPUs back."""
    from ray._private import state  # the actor table: Ray's public listing needs the dashboard, off here

    actors = sum(actor.get("State") != "DEAD" for actor in state.actors().values())
    return actors + sum(group["state"] != "REMOVED" for group in ray.util.placement_group_table().values())


@pytest.fixture(autouse=True)
def ray_session_released(request: pytest.FixtureRequest):
    """Each test that used the shared Ray session hands on a session with every CPU free. Ray can keep a
    fractional CPU leased after a study with no actor or placement group left to hold it (seen after
    test_machine_independent_selection's fractional-CPU trials, not every time: Ray's placement groups removed
    while being placed can leak what they had reserved); the tests after it would find that much less Ray. Then
    the session restarts, and the terminal says so: as soon as nothing is left that could return the CPUs, else
    after RELEASE_WAIT_S."""
    yield
    if "ray_session" not in request.fixturenames:
        return
    import ray

    if not ray.is_initialized():
        return
    deadline = time.monotonic() + RELEASE_WAIT_S
    orphaned_since = None
    while (busy := _busy_cpus(ray)) > 1e-3 and time.monotonic() < deadline:
        gc.collect()  # an actor handle kept only by a reference cycle holds its CPUs until a collection
        if _holders(ray):
            orphaned_since = None
        elif orphaned_since is None:
            orphaned_since = time.monotonic()
        elif time.monotonic() - orphaned_since >= ORPHANED_S:
            break
        time.sleep(0.5)
    if busy > 1e-3:
        ray.shutdown()
        _start_ray()
        print(f"\n[conftest] {busy:g} CPU(s) of the shared Ray session still held after {request.node.nodeid} "
              f"({'with nothing left to return them' if orphaned_since is not None else f'{RELEASE_WAIT_S} s'}): "
              "restarted the session", file=request.config.stash[_STDERR], flush=True)


@pytest.fixture(scope="session")
def tiny_reference(ray_session, repo_root, tmp_path_factory):
    """One uninterrupted run of tests.helpers_tiny's study: what every killed-and-resumed one (local
    storage, S3) must end up equal to. Run once for the suite (~30 s)."""
    from sptune.sweep import main
    from tests.helpers_tiny import TINY, tiny_spec

    out = tmp_path_factory.mktemp("tiny_reference") / "out"
    assert main([tiny_spec(repo_root), "--output", str(out), *TINY]) == 0
    return out


@pytest.fixture(scope="session")
def shown_study(repo_root, tmp_path_factory):
    """tests.helpers_tiny's SHOWN study, run as a user runs it (a subprocess of the CLI, progress every
    second) against a real `mlflow server`, which stays up for the session: what test_ui and
    test_optuna_storage read. One run for both (~45 s)."""
    import json
    import subprocess
    import sys
    from pathlib import Path
    from types import SimpleNamespace

    from mlflow.tracking import MlflowClient

    from tests.helpers_cluster import MlflowServer
    from tests.helpers_tiny import SHOWN, tiny_spec

    root = tmp_path_factory.mktemp("shown")
    server = MlflowServer(root / "mlflow")
    server.launch()
    try:
        server.wait()
        out = root / "digits"
        env = {**os.environ, "SPTUNE_PROGRESS_SECONDS": "1", "PYTHONPATH": repo_root}
        cmd = [sys.executable, "-m", "sptune.sweep", tiny_spec(repo_root), "--output", str(out),
               "--tracking-uri", server.uri, *SHOWN]  # fmt: skip
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, cwd=root)
        assert proc.returncode == 0, proc.stderr[-3000:]
        results = json.loads((out / "results.json").read_text())
        client = MlflowClient(tracking_uri=server.uri)
        runs = client.search_runs([results["mlflow"]["experiment_id"]], max_results=1000)
        yield SimpleNamespace(out=Path(out), stdout=proc.stdout, results=results, client=client, runs=runs)
    finally:
        server.stop()


@pytest.fixture(scope="module")
def postgres():
    """tests.helpers_optuna's PostgreSQL server, one per test module that asks: its URL (with the password)."""
    from tests.helpers_optuna import postgres_server

    with postgres_server() as server:
        yield server.url


@pytest.fixture
def one_torch_thread():
    """Tiny models: a second torch thread only adds contention on a shared machine (3-10x slower here)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def repo_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def offline_data_env(tmp_path, monkeypatch):
    """Data tests: a private cache, no hub, no user data directory."""
    monkeypatch.setenv("SPTUNE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("SPTUNE_DATA_DIR", raising=False)
