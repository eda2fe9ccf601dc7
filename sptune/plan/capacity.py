"""How many trials run at once: the CPU and GPU shares a cluster, or this machine (sptune.machine), holds."""

from __future__ import annotations

import math
import os

from sptune.machine import local_gpus, visible_gpus
from sptune.spec import SweepSpec

__all__ = ["concurrency", "local_gpus", "visible_gpus"]

def concurrency(spec: SweepSpec, cluster_cpus: float | None = None, cluster_gpus: float | None = None) -> int:
    """Trials that run at once: as many as the CPUs hold and, for trials that reserve a GPU share, as many as the
    GPUs hold (Ray starts a trial only where both fit), at most `resources.max_concurrent`; with packs
    (`resources.pack`: K) K trials per share, rounded down to whole packs. Counted on this machine where no cluster
    is given. At least 1 (a run without the GPUs it asks for is refused by preflight)."""
    res = spec.resources
    cpus = cluster_cpus if cluster_cpus is not None else (os.cpu_count() or 1)
    fits = _shares(cpus, res.cpu)
    if res.gpu > 0:
        fits = min(fits, _shares(cluster_gpus if cluster_gpus is not None else local_gpus(), res.gpu))
    fits = max(1, fits)
    if res.pack > 1:
        # Whole packs: a pack's members wait for each other, so a slot short of a pack would stall the rest. A pack
        # holds one trial's share (its executor trains all its members); max_concurrent counts trials.
        packs = min(fits, (res.max_concurrent or fits * res.pack) // res.pack)
        return res.pack * max(1, packs)
    return min(fits, res.max_concurrent or fits)


def _shares(total: float, share: float) -> int:
    # Ray counts resources in fixed point (1e-4): 0.3 / 0.1 is 3 shares there, not 2.999....
    return math.floor(total / share + 1e-6)
