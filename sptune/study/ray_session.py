"""The Ray instance a study runs on: joined (a cluster) or started (local), and stopped only
by the process that started or joined it."""

from __future__ import annotations

import json
import logging
import os
import sys
from pathlib import Path
from types import ModuleType

from sptune.errors import RuntimeFailure

_owned = False  # True once this process called ray.init, so it must call ray.shutdown
# Prometheus file-based service discovery: the name (and place, the Ray temp dir) Ray's dashboard
# writes it under, so dashboards/prometheus/prometheus.yml reads a local study and a cluster alike.
SERVICE_DISCOVERY_FILE = "prom_metrics_service_discovery.json"


def _ray() -> ModuleType:
    import ray  # here, not at the top: the preflight imports this module, and a refusal never pays for Ray

    return ray


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
    ray = _ray()
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
    # `ray start --head` runs the dashboard, whose writer keeps the targets file current there.
    print(
        f"[sptune] live metrics: the Ray head lists its nodes for Prometheus in {SERVICE_DISCOVERY_FILE} "
        "in its --temp-dir (default /tmp/ray); see dashboards/README.md",
        flush=True,
    )


def ensure_running(verbose: bool = False) -> None:
    """Start a local Ray instance unless this process is already connected to one. Ray's INFO logs (its
    start-up banner, Tune's "Wrote the latest version ..." lines) print only when `verbose` (--verbose)."""
    global _owned
    if is_connected():
        return
    ray = _ray()
    _quiet_ray()
    # Ask Ray to use loopback for a local instance (the dashboard is off; Ray may still
    # bind its GCS port on the machine's address, see docs/cluster.md).
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1",
             logging_level=logging.INFO if verbose else logging.WARNING)
    _owned = True
    _announce(write_service_discovery())


def write_service_discovery() -> Path | None:
    """Write Prometheus' targets for this local Ray: its metrics agent, which serves trial and node
    metrics with the dashboard off too. Ray's own writer of this file is a dashboard module, and the
    dashboard costs ~1 GiB and several processes (docs in dashboards/README.md), so sptune writes
    the same file in the same places: the session dir, linked from the Ray temp dir's root."""
    ray = _ray()
    node = ray._private.worker._global_node  # no public API names the temp dir
    if node is None or ray._private.utils.get_dashboard_dependency_error() is not None:
        return None  # Ray without ray[default]: its agent runs minimal, with no metrics exporter
    ports = [n.get("MetricsExportPort") for n in ray.nodes() if n.get("Alive")]
    targets = [f"127.0.0.1:{port}" for port in ports if port and port > 0]
    if not targets:
        return None  # metrics collection disabled (RAY_enable_metrics_collection=0)
    session = Path(node.get_session_dir_path())
    target = session / SERVICE_DISCOVERY_FILE
    tmp = session / f"tmp_{SERVICE_DISCOVERY_FILE}"
    tmp.write_text(json.dumps([{"labels": {"job": "ray"}, "targets": targets}]))
    os.replace(tmp, target)  # Prometheus may read it at any moment: never half-written
    link = Path(node.get_temp_dir_path()) / SERVICE_DISCOVERY_FILE
    tmp_link = link.with_name(f"tmp_{os.getpid()}_{SERVICE_DISCOVERY_FILE}")
    try:
        tmp_link.unlink(missing_ok=True)
        tmp_link.symlink_to(target)
        os.replace(tmp_link, link)  # like Ray: the latest session on this temp dir is the one listed
    except OSError:
        return target
    return link


def _announce(path: Path | None) -> None:
    if path is None:
        print("[sptune] live metrics: off (they need ray[default] and Ray's metrics collection on)", flush=True)
    else:
        print(f"[sptune] live metrics: Prometheus targets in {path} (dashboards/prometheus/prometheus.yml)", flush=True)


def release() -> None:
    """Stop Ray if this process started or joined it; leave a caller's own Ray running."""
    global _owned
    if _owned:
        _ray().shutdown()
        _owned = False


def job_submission_id() -> str | None:
    """The Ray job this process is the driver of (`ray job submit`, `python -m sptune.jobs submit`),
    or None. Ray's job supervisor hands its driver the job's config, metadata included, in this
    variable; read without importing ray, as the id is needed before Ray is joined."""
    config = os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR")
    if not config:
        return None
    try:
        return json.loads(config).get("metadata", {}).get("job_submission_id") or None
    except (ValueError, AttributeError):
        return None


def alive_nodes() -> int:
    return sum(1 for node in _ray().nodes() if node.get("Alive"))


def cluster_cpus() -> float | None:
    return _ray().cluster_resources().get("CPU")


def cluster_gpus() -> float:
    return float(_ray().cluster_resources().get("GPU", 0.0))


def largest_node_gpus() -> float:
    """The most GPUs one alive node offers: a trial's GPU share must fit on a single node."""
    return max((float(n.get("Resources", {}).get("GPU", 0.0)) for n in _ray().nodes() if n.get("Alive")), default=0.0)
