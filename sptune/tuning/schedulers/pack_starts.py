"""Which paused trial to start when trials are packed: never one that would leave a pack waiting without a slot.

A member at its pack's barrier holds a concurrency slot while it waits for its pack-mates. So a promoted member
whose pack-mates already run goes first (its pack trains only once it is back), and a paused member of a pack
none of whose members run starts only when every startable member of its pack fits in the free slots. New
trials start as Tune starts them; the staged searcher suggests a new pack only when all of it fits.
"""

from __future__ import annotations

import math
from typing import Any

from ray.tune.experiment import Trial

from sptune.tuning.packs.membership import PackSlot


def _pack(trial: Any) -> str:
    slot = PackSlot.of(trial.config)
    return slot.name if slot is not None else f"solo:{trial.trial_id}"


def pack_aware_pick(candidates: list[Any], trials: list[Any], max_concurrent: int | None) -> Any | None:
    """Of `candidates` (startable trials, lowest index first), the one to start now, or None; `trials`: all of
    the controller's."""
    busy = [t for t in trials if t.status in (Trial.RUNNING, Trial.PENDING)]
    free = (max_concurrent or math.inf) - len(busy)
    training = {_pack(t) for t in busy}
    paused = [t for t in candidates if t.status == Trial.PAUSED]
    for trial in paused:
        if _pack(trial) in training:  # owed to a pack that trains: it cannot go on without this member
            return trial if free >= 1 else None
    first = candidates[0]
    if first.status != Trial.PAUSED:
        return first  # a new trial: Tune starts it anyway
    need = sum(_pack(t) == _pack(first) for t in paused)
    return first if free >= need else None
