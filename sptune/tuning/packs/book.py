"""The driver's side of packs: it tells each executor which members left, and ends an executor with its last.

"Member k left" comes from here, never from the member's own actor: halving pauses a trial by stopping its actor
(its cleanup runs, yet it comes back), and stops a paused trial with no actor running at all. The driver sees
every trial's status, so at each of the controller's steps it tells an executor about members whose trial has
ended (TERMINATED or ERROR) and kills the executor once every member of a full pack has ended. A trial that is
retried comes back PENDING and joins again. After Tuner.restore the trials that had ended before the interruption
are told again to the executors the resumed members create, so none waits for them.
"""

from __future__ import annotations

from typing import Any

import ray
from ray.tune import Callback
from ray.tune.experiment import Trial

from sptune.tuning.packs.executor import existing
from sptune.tuning.packs.membership import PackSlot

_ENDED = (Trial.TERMINATED, Trial.ERROR)


class PackBook(Callback):
    def __init__(self) -> None:
        self.told: dict[str, set[int]] = {}  # executor name -> members told to leave
        self.gone: set[str] = set()  # executors killed with their last member

    def __getstate__(self) -> dict:
        return {}  # this driver's view only: a restored driver tells every executor again

    def __setstate__(self, state: dict) -> None:
        self.__init__()

    def on_step_begin(self, iteration: int, trials: list, **info: Any) -> None:
        packs: dict[str, tuple[int, dict[int, Any]]] = {}
        for trial in trials:
            slot = PackSlot.of(trial.config)
            if slot is not None:
                packs.setdefault(slot.name, (slot.size, {}))[1][slot.member] = trial.status
        for name, (size, members) in packs.items():
            self._reconcile(name, size, members)

    def _reconcile(self, name: str, size: int, members: dict[int, Any]) -> None:
        ended = {k for k, status in members.items() if status in _ENDED}
        told = self.told.setdefault(name, set())
        told &= ended  # a retried member is live again: tell it again if it ends again
        if len(members) == size and ended == set(members):
            if name not in self.gone:
                handle = existing(name)
                if handle is not None:
                    ray.kill(handle, no_restart=True)
                self.gone.add(name)
            return
        self.gone.discard(name)
        new = ended - told
        if not new:
            return
        handle = existing(name)
        if handle is None:
            return  # not created yet (or between lives): told once it exists
        for k in sorted(new):
            handle.leave.remote(k)
        told |= new
