"""The Ray instance a study runs on: joined (a cluster) or started (local), and stopped only
by the process that started or joined it."""

from __future__ import annotations

import os
import sys

from sptune.errors import RuntimeFailure

_owned = False  # True once this process called ray.init, so it must call ray.shutdown


def is_connected() -> bool:
    # Checked without importing ray: a refused spec must never pay for (or start) Ray.
    return "ray" in sys.modules and sys.modules["ray"].is_initialized()


def _quiet_ray() -> None:
    # sptune prints its own per-search progress; Tune's banners and sync warnings are noise here.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")


def join(address: str) -> None:
    """Connect to a running cluster (its head was already seen to answer)."""
    global _owned
    import ray

    _quiet_ray()
    try:
        ray.init(address=address, log_to_driver=False)
    except (ConnectionError, RuntimeError) as err:  # e.g. token auth refused the connection
        raise RuntimeFailure(
            f"--address {address}",
            f"could not join the Ray cluster ({str(err).splitlines()[0][:200]})",
            "check the address; a cluster started with token auth needs RAY_AUTH_MODE=token and its token "
            "(~/.ray/auth_token, RAY_AUTH_TOKEN_PATH or RAY_AUTH_TOKEN) in this environment",
        ) from err
    _owned = True


def ensure_running() -> None:
    """Start a local Ray instance unless this process is already connected to one."""
    global _owned
    if is_connected():
        return
    import ray

    _quiet_ray()
    # Ask Ray to use loopback for a local instance (the dashboard is off; Ray may still
    # bind its GCS port on the machine's address, see docs/cluster.md).
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    _owned = True


def release() -> None:
    """Stop Ray if this process started or joined it; leave a caller's own Ray running."""
    global _owned
    if _owned:
        import ray

        ray.shutdown()
        _owned = False


def alive_nodes() -> int:
    import ray

    return sum(1 for node in ray.nodes() if node.get("Alive"))


def cluster_cpus() -> float | None:
    import ray

    return ray.cluster_resources().get("CPU")
