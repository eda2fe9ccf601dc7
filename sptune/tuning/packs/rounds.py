"""A pack's members and its barrier, with no Ray in it (the executor actor wraps it; tests drive it with threads).

Each member is a solo job built exactly as a solo trial builds it (`build`); a member trial asks for its next
round (`next_round`) and gets its own loop's metrics. A round runs when every member still expected has asked:
members neither left (`leave`: the driver saw its trial end, or it was stopped) nor diverged. Among the askers,
those at the lowest round train first, ahead ones wait: members restored from checkpoints of different rounds
(a resume) catch up alone until all are level, then train fused again (`PackLoop` refuses members at different
optimizer steps). Members at one round train as packs of what `check_packable` accepts (one per batch size); a
lone member, and every member where the pack does not fuse (``fuses(device)`` false: `resources.pack_fusion`),
runs its solo loop. A wait longer than `timeout_s` fails with the members it waited for.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import torch

from sptune.training.loops import Diverged
from sptune.training.packing.pack import PackError, PackLoop, check_packable


class PackTimeout(RuntimeError):
    """Members never asked for a round the others waited for."""


def _on_cpu(value: Any) -> Any:
    """A state dict as any process can load it (the member trial may have no GPU), detached from the loop."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)  # a copy: never the live weights the next round changes
    if isinstance(value, dict):
        return {k: _on_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_on_cpu(v) for v in value)
    return value


class PackRounds:
    def __init__(self, name: str, size: int, build: Callable[[dict, Any], Any], timeout_s: float,
                 fuses: Callable[[torch.device], bool] = lambda device: True) -> None:
        self.name, self.size, self.build, self.timeout_s, self.fuses = name, size, build, timeout_s, fuses
        self.jobs: dict[int, Any] = {}
        self.left: set[int] = set()
        self.diverged: set[int] = set()
        self.asking: set[int] = set()
        self.dirty: set[int] = set()  # members whose state a failed round left between rounds
        self.results: dict[int, dict] = {}
        self.cond = threading.Condition()
        self._packs: dict[tuple[int, ...], PackLoop] = {}
        self.fused_rounds = 0  # rounds trained as one fused pack of >1 members (for tests and the log)

    # ------------------------------------------------------------------ membership

    def join(self, k: int, config: dict, budget: Any) -> Any:
        """Member ``k``'s job, built on first join (a paused member resuming keeps its trained state)."""
        with self.cond:
            self.left.discard(k)
            if k not in self.jobs or k in self.diverged or k in self.dirty:  # new, or retried after failing
                self.jobs[k] = self.build(config, budget)
                self.diverged.discard(k)
                self.dirty.discard(k)
                self.results.pop(k, None)
                self._packs.clear()
            self.cond.notify_all()
            return self.jobs[k]

    def leave(self, k: int) -> None:
        """Member ``k`` trains no further here (its trial ended): the others stop waiting for it."""
        with self.cond:
            self.left.add(k)
            self.asking.discard(k)
            self.cond.notify_all()

    def expected(self) -> set[int]:
        return {k for k in range(self.size) if k not in self.left and k not in self.diverged}

    # ------------------------------------------------------------------ state (today's per-trial format)

    def state(self, k: int) -> dict:
        with self.cond:
            return _on_cpu(self.jobs[k].loop.state_dict())

    def load(self, k: int, state: dict) -> None:
        """Member ``k`` continues from ``state`` (its trial's checkpoint); a no-op where it already is there."""
        with self.cond:
            loop = self.jobs[k].loop
            at = (int(state["epoch"]), int(state.get("optimizer_steps", -1)))
            if k in self.dirty or (loop.epoch, loop.optimizer_steps) != at:
                self.dirty.discard(k)
                loop.load_state_dict(state)
                self._packs.clear()
            self.results.pop(k, None)  # a round trained past the checkpoint is trained again from it

    # ------------------------------------------------------------------ the barrier

    def next_round(self, k: int) -> dict:
        """Member ``k``'s next round: its loop's metrics, ``{"diverged": 1, "error": ...}``, or ``{"left": 1}``."""
        deadline = time.monotonic() + self.timeout_s
        with self.cond:
            self.left.discard(k)
            self.asking.add(k)
            while k not in self.results:
                if k in self.left:
                    return {"left": 1}
                if self.expected() <= self.asking:
                    self._run()
                    continue
                if time.monotonic() >= deadline:
                    text = self._timeout_text(k)
                    self.asking.discard(k)
                    raise PackTimeout(text)
                self.cond.wait(timeout=min(5.0, max(0.01, deadline - time.monotonic())))
            return self.results.pop(k)

    def _timeout_text(self, k: int) -> str:
        missing = sorted(self.expected() - self.asking)
        return (f"pack {self.name}: member {k} waited {self.timeout_s:.0f} s for its next round, but members "
                f"{missing} never asked (their trials did not run or did not end); raise SPTUNE_PACK_WAIT_S if "
                "they were only slow, or rerun with resources.pack: 1")

    def _run(self) -> None:
        """One round of the askers at the lowest round, as fused packs where they fit; results for each."""
        askers = sorted(self.asking & set(self.jobs))
        lowest = min(self.jobs[k].loop.epoch for k in askers)
        level = [k for k in askers if self.jobs[k].loop.epoch == lowest]
        for group in self._groups(level):
            try:
                self.results.update(self._train(group))
            except Exception as err:  # noqa: BLE001 - every member of the group fails with it, none waits on
                self.results.update({k: {"failed": f"{type(err).__name__}: {err}"} for k in group})
                self.dirty.update(group)  # trained part of a round: a restore must load its checkpoint
        self.asking -= set(level)
        self.cond.notify_all()

    def _groups(self, members: list[int]) -> list[tuple[int, ...]]:
        groups: list[list[int]] = []
        for k in members:
            if not self.fuses(torch.device(self.jobs[k].loop.device)):
                groups.append([k])  # looped: its solo loop's round, alone
                continue
            for group in groups:
                try:
                    check_packable([self.jobs[m].loop for m in (*group, k)])
                except PackError:
                    continue
                group.append(k)
                break
            else:
                groups.append([k])
        return [tuple(g) for g in groups]

    def _train(self, group: tuple[int, ...]) -> dict[int, dict]:
        if len(group) == 1:
            k = group[0]
            try:
                return {k: self.jobs[k].loop.train_round()}
            except Diverged as err:
                self.diverged.add(k)
                return {k: {"diverged": 1, "error": str(err)}}
        pack = self._packs.get(group)
        if pack is None:
            pack = self._packs[group] = PackLoop([self.jobs[k].loop for k in group])
        metrics = pack.train_round()
        self.fused_rounds += 1
        for j, k in enumerate(group):
            if pack.status[j] == "diverged":
                self.diverged.add(k)
        return {group[j]: found for j, found in metrics.items()}
