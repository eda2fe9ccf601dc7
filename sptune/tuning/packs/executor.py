"""The pack executor: a detached, named Ray actor per pack holding its members' loops (`rounds.PackRounds`).

Detached, and outside the creating trial's placement group, because a member trial's actor stops (and its
placement group is removed) whenever halving pauses it at a rung, and an actor it owned or that lived in its group
would die with it, taking the other members' state. Named (study prefix / stage / pack index, in `PACK_NAMESPACE`), so
the first member to start creates it and the others, a resumed member and the driver find it. Explicit ends: the
driver's `PackBook` kills it once every member's trial has ended, and a study kills its stale ones when it starts
or resumes (`end_stale`), so a killed driver's executors never train on. It holds the pack's compute: the GPU share
and `resources.cpu` threads; the member trials hold only a token CPU share each (`member_resources`).
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

import ray
import torch

from sptune.spec import SweepSpec
from sptune.storage import moves, set_moves
from sptune.tasks.base import TaskSplits
from sptune.tuning.packs.membership import PACK_NAMESPACE, PackSlot
from sptune.tuning.packs.rounds import PackRounds
from sptune.tuning.trial_jobs import job_for  # the trainable's own builder: members are solo trials

# How long a member waits at the barrier for its pack-mates before the trial fails with who never came.
WAIT_S = float(os.environ.get("SPTUNE_PACK_WAIT_S", "3600"))


def member_resources(spec: SweepSpec) -> dict[str, float]:
    """What one member trial reserves: 1/K of the pack's CPUs (so K members reserve what one trial did) and no
    GPU (the executor holds the pack's share)."""
    res = spec.resources
    return {"cpu": res.cpu / res.pack, "gpu": 0}


class PackExecutor:
    """The actor's body: builds members as the trainable does and forwards to `PackRounds`."""

    def __init__(self, name: str, size: int, spec: SweepSpec, data: TaskSplits,
                 folder_moves: dict[str, str] | None = None) -> None:
        torch.set_num_threads(max(1, math.floor(spec.resources.cpu)))
        # The members' configs name checkpoints under the study folder as first recorded: in a moved folder
        # (`--resume --output NEW`), read them under its copy, as the member trials themselves do.
        set_moves(folder_moves or {})
        self.rounds = PackRounds(name, size, lambda config, budget: job_for(spec, data, config, budget), WAIT_S,
                                 lambda device: spec.resources.fuses_packs(device.type == "cuda"))

    def join(self, k: int, config: dict, budget: Any) -> dict[str, Any]:
        job = self.rounds.join(k, config, budget)
        return {"score_key": job.score_key, "first_epoch_metrics": job.first_epoch_metrics(),
                "mlflow_params": {**job.optim_params(), **job.run_params()},
                "epoch": job.loop.epoch, "tokens_seen": job.loop.tokens_seen}

    def next_round(self, k: int) -> dict:
        return self.rounds.next_round(k)

    def leave(self, k: int) -> None:
        self.rounds.leave(k)

    def state(self, k: int) -> dict:
        return self.rounds.state(k)

    def load(self, k: int, state: dict) -> None:
        self.rounds.load(k, state)

    def fused_rounds(self) -> int:
        return self.rounds.fused_rounds


_ACTOR: Any = None  # the actor class, made once per process


def executor_for(slot: PackSlot, spec: SweepSpec, data: TaskSplits) -> Any:
    """The pack's executor, created by whichever member comes first (the others' arguments are ignored), with that
    member's folder moves (`storage.moves`, set by its trainable from the driver's)."""
    global _ACTOR
    if _ACTOR is None:
        _ACTOR = ray.remote(PackExecutor)
    actor = _ACTOR.options(
        name=slot.name, namespace=PACK_NAMESPACE, lifetime="detached", get_if_exists=True,
        num_cpus=0, num_gpus=spec.resources.gpu, max_concurrency=slot.size + 8,
        # Outside the creating trial's placement group (Tune has trials' children placed in it): that group is
        # removed when halving pauses the trial, and would take the executor with it.
        scheduling_strategy="DEFAULT",
    )
    return actor.remote(slot.name, slot.size, spec, data, moves())


def existing(name: str) -> Any | None:
    try:
        return ray.get_actor(name, namespace=PACK_NAMESPACE)
    except ValueError:
        return None


def end_stale(prefix: str) -> int:
    """Kill every executor whose name starts with ``prefix`` (a study's, left by a killed driver); how many."""
    if not ray.is_initialized():
        return 0
    names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
             if a.get("namespace") == PACK_NAMESPACE and a["name"].startswith(prefix)]
    for name in names:
        handle = existing(name)
        if handle is not None:
            ray.kill(handle, no_restart=True)
    deadline = time.monotonic() + 30
    while names and time.monotonic() < deadline and any(existing(n) is not None for n in names):
        time.sleep(0.2)  # a name is free again only once its actor is dead
    return len(names)
