"""Synchronous successive halving for one stage: early stopping whose decisions ignore finish order.

A trial that reaches a rung waits there (PAUSED, checkpointed) until every trial of its stage has reached
it or ended; then the top ⌈n/η⌉ by the stage's metric go on (n: the trials that entered the rung, so the
rung sizes are those of `sptune.rules.rungs`), ties broken as selection breaks them (`rung_metrics`: the
best epoch's val_loss, then its epoch, then the trial created first), and the rest stop.
It must know the stage's whole trial budget: the first rung is decided only when all of them exist.
Its decisions are saved with every experiment snapshot (`state`, plain JSON per trial id) and loaded back
before Tuner.restore re-adds the trials (`load`), so a resumed stage decides as the uninterrupted one would.
Why not ASHA, and what a resume restores: docs/design/tuning.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ray.tune.experiment import Trial
from ray.tune.schedulers import FIFOScheduler, TrialScheduler

from sptune.rules.ranking import RankKey, creation_index, rank_key
from sptune.rules.rungs import rung_epochs, rung_sizes


def trial_index(trial: Any) -> int:
    return creation_index(getattr(trial, "experiment_tag", None))


def rung_metrics(result: dict, metric: str, score: str) -> dict[str, Any]:
    """What the ranking rule reads of a trial at a rung: the stage's metric as its `score` ("val_acc" or
    "val_loss"); for a best-so-far metric (`best_val_acc`) also its best epoch's val_loss and epoch, which the
    trainable reports as best_val_loss and best_epoch: the numbers selection reads from that epoch's
    checkpoint, so a tie on the score goes the same way in both."""
    found = {score: result.get(metric)}
    if metric.startswith("best_"):
        found.setdefault("val_loss", result.get("best_val_loss"))
        found["epoch"] = result.get("best_epoch")
    return found


def _plain(value: Any) -> Any:
    """A rung's number as JSON holds it (results may carry numpy scalars)."""
    return value if value is None or isinstance(value, (int, str)) else float(value)


@dataclass
class _Entry:
    trial: Any  # None for a trial loaded from a snapshot until Tune adds it again
    index: int
    values: dict[int, dict[str, Any]] = field(default_factory=dict)  # rung epoch -> rung_metrics when it got there
    passed: int = 0  # rungs this trial has been promoted past
    ended: bool = False  # completed, errored, or stopped
    resumable: bool = False  # promoted while paused: choose_trial_to_run may start it again
    stopped: bool = False  # halving stopped it at rung `passed` (it lost there)

    def saved(self) -> dict[str, Any]:
        values = {str(rung): {k: _plain(v) for k, v in found.items()} for rung, found in self.values.items()}
        return {"index": self.index, "values": values, "passed": self.passed, "ended": self.ended,
                "resumable": self.resumable, "stopped": self.stopped}

    @classmethod
    def loaded(cls, saved: dict[str, Any]) -> _Entry:
        values = {int(rung): dict(found) for rung, found in saved["values"].items()}
        return cls(None, saved["index"], values, saved["passed"], saved["ended"], saved["resumable"], saved["stopped"])

    def waiting(self, rungs: list[int]) -> bool:
        """At a rung not yet decided: reached it, not promoted past it, still in the stage."""
        return not self.ended and not self.resumable and self.passed < len(rungs) and rungs[self.passed] in self.values


class SuccessiveHalving(FIFOScheduler):
    """One bracket of synchronous successive halving over one stage's `n_trials` trials.

    n_trials: the stage's trials, all of which enter the first rung
    max_t: the budget in epochs (or evaluation rounds); at it every trial ends
    grace_period: the first rung's epoch
    reduction_factor: η: each rung keeps ⌈entered/η⌉ of the trials that entered it, and rungs sit at
        grace_period·η^k below max_t
    metric: the result key trials are ranked by at a rung (with the ranking rule's tie-breaks)
    mode: "max" or "min", the metric's direction
    rungs: the rung epochs, given for a bracket of Hyperband that starts at a later rung of the same ladder;
        None: the ladder from grace_period
    """

    _supports_buffered_results = False  # every epoch's result must be seen at its rung

    def __init__(
        self,
        n_trials: int,
        max_t: int,
        grace_period: int,
        reduction_factor: float,
        metric: str,
        mode: str,
        rungs: list[int] | None = None,
    ) -> None:
        super().__init__()
        self.n_trials, self.eta = n_trials, reduction_factor
        # `rungs` given: one bracket of Hyperband, which starts at a later rung of the same ladder.
        self.rungs = rung_epochs(grace_period, reduction_factor, max_t) if rungs is None else list(rungs)
        # How many go on from each rung: ⌈entered/η⌉ of the trials that *entered* it, not of those that
        # reached it, so a stage whose trials diverge still trains as many trials as far as the plan says.
        self.sizes = rung_sizes(n_trials, reduction_factor, len(self.rungs))
        self._metric, self.mode = metric, mode
        self.entries: dict[str, _Entry] = {}
        self.decided = 0  # rungs decided so far (always in order)
        self._deciding = False  # stopping a trial calls back into this scheduler
        self._to_stop: list[_Entry] = []  # restored trials halving had stopped: stopped at the next choice

    def set_search_properties(self, metric: str | None, mode: str | None, **spec: Any) -> bool:
        return True  # built with its search's own metric and mode

    # ------------------------------------------------------------ Tune's notifications

    def on_trial_add(self, tune_controller: Any, trial: Trial) -> None:
        entry = self.entries.get(trial.trial_id)
        if entry is not None:  # requeued to retry after a failure, or re-added by Tuner.restore: it keeps its rungs
            restored, entry.trial = entry.trial is None, trial
            if restored:
                self._restored(tune_controller, entry)
            return
        # After Tuner.restore, finished trials are added again: they take no further part.
        ended = trial.status in (Trial.TERMINATED, Trial.ERROR)
        self.entries[trial.trial_id] = _Entry(trial, trial_index(trial), ended=ended)

    def on_trial_result(self, tune_controller: Any, trial: Trial, result: dict) -> str:
        entry = self.entries[trial.trial_id]
        entry.resumable = False
        epoch = result.get("training_iteration", 0)
        # A loop, not an if: a trial resumed after Tuner.restore may already be past several rungs.
        while (step := entry.passed) < len(self.rungs) and epoch >= self.rungs[step]:
            if step < self.decided:
                return TrialScheduler.STOP  # a safeguard: its rung was decided without it
            entry.values.setdefault(self.rungs[step], rung_metrics(result, self._metric, self._score))
            if result.get("done"):
                return TrialScheduler.CONTINUE  # it ends now (diverged); on_trial_complete counts it
            if self._decide_ready(tune_controller, current=trial):
                return TrialScheduler.STOP
            if entry.passed == step:  # the rung still waits for the stage's other trials
                self._notify(tune_controller, "on_pause", trial)
                return TrialScheduler.PAUSE
        return TrialScheduler.CONTINUE

    def on_trial_complete(self, tune_controller: Any, trial: Trial, result: dict) -> None:
        self._end(tune_controller, trial)

    def on_trial_error(self, tune_controller: Any, trial: Trial) -> None:
        # Tune calls this also for a trial it is about to retry (max_failures), already marked
        # ERROR then; that trial is still to reach its rung, so the rung must wait for it.
        if trial.status != Trial.ERROR:
            self._end(tune_controller, trial)

    def on_trial_remove(self, tune_controller: Any, trial: Trial) -> None:
        self._end(tune_controller, trial)

    def choose_trial_to_run(self, tune_controller: Any) -> Trial | None:
        """New trials and promoted paused ones, lowest trial index first; never a trial still
        waiting at a rung."""
        startable = self.startable(tune_controller)
        return startable[0] if startable else None

    def startable(self, tune_controller: Any) -> list[Trial]:
        """Every trial `choose_trial_to_run` may start, lowest trial index first."""
        to_stop = self.__dict__.get("_to_stop", [])  # a scheduler pickled before it had one
        while to_stop:  # here, not in on_trial_add: Tune files a trial under its status after adding it
            tune_controller.stop_trial(to_stop.pop(0).trial)
        found = []
        for entry in sorted(self.entries.values(), key=lambda e: e.index):
            if entry.trial is None:  # loaded from a snapshot, not (yet) re-added by Tune
                continue
            status = entry.trial.status
            if status == Trial.PENDING or (status == Trial.PAUSED and entry.resumable):
                found.append(entry.trial)
        return found

    def debug_string(self) -> str:
        waiting = sum(not e.ended and e.passed == self.decided for e in self.entries.values())
        return f"Synchronous halving: rungs {self.rungs}, {self.decided} decided, {waiting} at the next"

    # ------------------------------------------------------------ decisions

    def _rank(self, entry: _Entry, rung: int) -> RankKey:
        """sptune.rules.ranking's rule, as selection applies it, on what a rung knows of a trial (missing
        or NaN numbers last), then the trial created first."""
        return rank_key(entry.values[rung], self._score, entry.index)

    @property
    def _score(self) -> str:
        """The stage's metric under the ranking rule's name for it."""
        return "val_acc" if self.mode == "max" else "val_loss"

    def _end(self, tune_controller: Any, trial: Trial) -> None:
        entry = self.entries.get(trial.trial_id)
        if entry is not None and not entry.ended:
            entry.ended = True
            self._decide_ready(tune_controller, current=None)

    def _rung_ready(self, step: int) -> bool:
        if len(self.entries) < self.n_trials:
            return False  # trials still to come would compete at the first rung
        rung = self.rungs[step]
        contenders = (e for e in self.entries.values() if e.passed == step)
        return all(e.ended or rung in e.values for e in contenders)

    def _decide_ready(self, tune_controller: Any, current: Trial | None) -> bool:
        """Decide every rung whose trials are all in; True if `current` is stopped."""
        if self._deciding:
            return False
        self._deciding, stop_current = True, False
        try:
            while self.decided < len(self.rungs) and self._rung_ready(self.decided):
                stop_current |= self._decide(tune_controller, self.decided, current)
                self.decided += 1
        finally:
            self._deciding = False
        return stop_current

    def _decide(self, tune_controller: Any, step: int, current: Trial | None) -> bool:
        rung = self.rungs[step]
        reached = [e for e in self.entries.values() if e.passed == step and rung in e.values]
        ranked = sorted(reached, key=lambda e: self._rank(e, rung))  # best first
        keep = min(self.sizes[step + 1], len(ranked))
        for entry in ranked[:keep]:
            entry.passed += 1
            if entry.trial is not current and not entry.ended:
                entry.resumable = True
                self._notify(tune_controller, "on_unpause", entry.trial)
        stop_current = False
        for entry in ranked[keep:]:
            entry.stopped = True
            if entry.trial is current:
                stop_current = True  # Tune stops it when on_trial_result returns STOP
            elif not entry.ended:
                tune_controller.stop_trial(entry.trial)  # paused (or saving before its pause)
        return stop_current

    # ------------------------------------------------------------ saved with the experiment snapshot

    def state(self) -> dict[str, Any]:
        """Everything this bracket has decided, as plain JSON: `decided` (rungs decided, in order) and per trial
        id its creation `index`, `values` (rung epoch -> what the ranking read there), `passed` (rungs it was
        promoted past), `ended`, `resumable` (promoted while paused, not yet resumed) and `stopped` (halving
        stopped it at rung `passed`)."""
        return {"decided": self.decided, "trials": {tid: e.saved() for tid, e in self.entries.items()}}

    def load(self, state: dict[str, Any]) -> None:
        """Take back a `state()` before Tune re-adds the trials (Tuner.restore): each keeps its rungs, and
        `on_trial_add` keeps it from training where the decisions say it must not."""
        self.decided, self._to_stop = state["decided"], []
        self.entries = {tid: _Entry.loaded(saved) for tid, saved in state["trials"].items()}

    def _restored(self, tune_controller: Any, entry: _Entry) -> None:
        """A trial Tuner.restore re-adds (unfinished ones come back PENDING, which Tune would start at once):
        one halving stopped is stopped without training; one waiting at an undecided rung waits again, paused
        and counted out of the searcher's slots, for the same decision. Setting the status here works because
        Tune files the trial under its status only after on_trial_add."""
        trial = entry.trial
        if trial.status in (Trial.TERMINATED, Trial.ERROR):
            entry.ended = True
        elif entry.stopped:
            trial.set_status(Trial.PAUSED)
            self._to_stop.append(entry)  # its stop reaches the searcher and the ledger as any stop does
        elif entry.ended:  # it had failed, and is retried (resume_errored): it takes part again
            entry.ended = False
        elif entry.waiting(self.rungs):
            trial.set_status(Trial.PAUSED)
            self._notify(tune_controller, "on_pause", trial)

    @staticmethod
    def _notify(tune_controller: Any, hook: str, trial: Trial) -> None:
        # The searcher counts paused trials out of its concurrency limit (as Ray's BOHB does).
        searcher = getattr(getattr(tune_controller, "search_alg", None), "searcher", None)
        if searcher is not None and hasattr(searcher, hook):
            getattr(searcher, hook)(trial.trial_id)
