"""A study's CPU request against the CPUs that will run it, refused before anything starts: a trial asking for
more CPUs than the cluster has waits PENDING for ever, and the plan would promise a concurrency that never runs."""

from __future__ import annotations

from sptune.errors import SpecError
from sptune.spec import SweepSpec


def check_cpu_request(spec: SweepSpec, cpus: float, where: str) -> None:
    """Refuse ``spec`` unless one trial's `resources.cpu` fits in the ``cpus`` that ``where`` offers (a local Ray
    instance: this machine's; a cluster: all of its nodes', an upper bound on any one node's)."""
    if spec.resources.cpu <= cpus:
        return
    raise SpecError(
        "resources.cpu", f"asks for {spec.resources.cpu:g} CPUs per trial but {where} has {cpus:g}, so no trial "
        "could start (each would wait PENDING until the run times out)",
        f"set resources.cpu to at most {cpus:g} (e.g. 1), or run where the CPUs are (--address)",
    )
