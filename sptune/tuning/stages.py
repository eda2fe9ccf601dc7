"""The study's one Tune searcher: a thin adapter over the stages' ledger (`sptune.judging.ledger`, which owns the
stages, their selections and failures) that asks each released stage's own searcher in turn, within its budget
and the study's concurrency, and hands each result back to the searcher that proposed the trial."""

from __future__ import annotations

import json
import math
import pickle
from typing import Any

from ray.tune.search import Searcher

from sptune.judging.ledger import Ledger
from sptune.tuning.packs.membership import PACK_KEY, PackSlot, slot_for
from sptune.tuning.searchers import BatchedSearcher, FixedConfigs


class StagedSearcher(Searcher):
    """Every released stage's own searcher in one: round-robin, the deepest stages first (pretraining before what
    needs it); it limits how many trials run at once, leaving out those paused at a rung (docs/design/tuning.md)."""

    # Packing (resources.pack > 1): K members a pack, named under the study's prefix (sptune.tuning.packs).
    # Class defaults: a searcher pickled before packing existed restores unpacked.
    pack_size = 1
    pack_prefix = ""

    def __init__(
        self, ledger: Ledger, searchers: dict[str, Searcher], fixed: dict[str, dict[str, Any]], decisions: Any = None
    ) -> None:
        super().__init__()
        self.ledger = ledger
        # The stages' scheduler (`StageScheduler`): its decisions are saved beside the ledger, in the same snapshot.
        self.decisions = decisions
        self.pending = dict(searchers)  # a search stage's own searcher, until it is released
        self.stage_fixed = fixed  # what each stage's trials carry besides their searched values
        self.searchers: dict[str, Searcher] = {}  # the released stages' searchers, in the order released
        self.fixed: dict[str, dict[str, Any]] = {}  # ... and what their trials carry
        self.turn = 0  # round-robin: the released stage after the last one to suggest
        self.max_concurrent: int | None = None
        self.live: set[str] = set()  # suggested, not yet ended
        self.paused: set[str] = set()  # live, but waiting at a rung without a slot

    def pack_trials(self, size: int, prefix: str) -> None:
        """Hand out each stage's trials in packs of `size` (its executors named under `prefix`)."""
        self.pack_size, self.pack_prefix = size, prefix

    def set_max_concurrency(self, max_concurrent: int) -> bool:
        self.max_concurrent = max_concurrent
        return True  # we limit, so Ray's ConcurrencyLimiter around us does not

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict, **spec: Any) -> bool:
        return True  # every stage's searcher was built with its own space, metric and mode

    def on_pause(self, trial_id: str) -> None:
        self.paused.add(trial_id)

    def on_unpause(self, trial_id: str) -> None:
        self.paused.discard(trial_id)

    def _take_releases(self) -> None:
        for r in (r for r in self.ledger.releases() if r.label not in self.searchers):
            self.searchers[r.label] = self.pending.pop(r.label) if r.configs is None else FixedConfigs(r.configs)
            self.fixed[r.label] = {**self.stage_fixed[r.label], **r.carry}

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        self.ledger.advance()  # a stage whose searcher ran out before its budget may be complete now
        self._take_releases()
        running = len(self.live - self.paused)
        if self.max_concurrent is not None and running >= self.max_concurrent:
            return None if self.ledger.open() else Searcher.FINISHED
        turn = [*list(self.searchers)[self.turn :], *list(self.searchers)[: self.turn]]
        labels = sorted(turn, key=lambda label: -self.ledger.depth[label])  # stable: round-robin per depth
        # A pack being handed out is finished first: its members wait for each other, each holding a slot.
        started = [label for label in labels if self._next_slot(label)[1] > 0]
        free = (self.max_concurrent or math.inf) - running
        for label in started[:1] or labels:
            config = self._suggest_from(label, trial_id, free)
            if config is not None:
                return config
        if self.ledger.open() and self.live:
            return None
        if self.ledger.open():  # waiting with none of our trials running: nothing could ever end the wait
            self.ledger.stall()
        return Searcher.FINISHED

    def _next_slot(self, label: str) -> tuple[int, int, int]:
        """(pack, member, size) of the stage's next trial; (0, 0, 1) unpacked or with no trial to start."""
        if self.pack_size <= 1 or not self.ledger.wants_trial(label):
            return 0, 0, 1
        trials, searcher = self.ledger.released[label], self.searchers[label]
        batch = searcher.batch_size if isinstance(searcher, BatchedSearcher) else trials.budget
        return slot_for(len(trials.started), trials.budget, batch, self.pack_size)

    def _suggest_from(self, label: str, trial_id: str, free: float) -> dict[str, Any] | None:
        """The stage's next config, with what its trials carry; None if it has none to give now (or its next
        trial starts a pack that the `free` slots cannot hold whole)."""
        if not self.ledger.wants_trial(label):
            return None
        pack, member, size = self._next_slot(label)
        if member == 0 and size > free:
            return None
        config = self.searchers[label].suggest(trial_id)
        if config == Searcher.FINISHED:  # ran out before its budget (e.g. a short grid)
            self.ledger.ran_out(label)
        if config in (None, Searcher.FINISHED):  # None: it waits for results (its batch)
            return None
        self.turn = (list(self.searchers).index(label) + 1) % len(self.searchers)
        self.ledger.trial_started(trial_id, label)
        self.live.add(trial_id)
        config = {**self.fixed[label], **config}  # a given config (a re-run, a grid repeat) names its own seed
        if self.pack_size > 1:
            config[PACK_KEY] = PackSlot(f"{self.pack_prefix}/{label}/{pack}", member, size).as_config()
        return config

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        if (label := self.ledger.stage_of(trial_id)) is not None:
            self.searchers[label].on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        self.live.discard(trial_id)
        self.paused.discard(trial_id)
        if (label := self.ledger.stage_of(trial_id)) is not None:
            self.searchers[label].on_trial_complete(trial_id, result=result, error=error)

    # Saved with Tune's experiment: Tuner.restore continues each stage's search (Optuna's history too), the ledger
    # and the stages' scheduler decisions. Tune saves the searcher in the same driver step as the trial list, and
    # restores it before it re-adds the trials, which is when the scheduler needs its decisions back.
    def save(self, checkpoint_path: str) -> None:
        state = {k: v for k, v in self.__dict__.items() if k != "decisions"}
        if self.decisions is not None:
            state["decisions_json"] = json.dumps(self.decisions.state())  # JSON: nothing but plain values in it
        with open(checkpoint_path, "wb") as f:
            pickle.dump(state, f)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as f:
            state = pickle.load(f)  # our own file, written by save() above
        self.ledger.load(state.pop("ledger"))  # in place: the driver's callbacks hold this same ledger
        decisions = state.pop("decisions_json", None)
        if decisions is not None and self.decisions is not None:  # in place: the restored Tuner's own scheduler
            self.decisions.load(json.loads(decisions))
        self.__dict__.update(state)
        # Tuner.restore queues every unfinished trial to run again; the scheduler pauses again (on_pause) those
        # its decisions keep waiting at a rung.
        self.paused = set()
