"""Optuna in batches: one variant's proposals that do not depend on which trial finished first.

TPE proposes from the results it has been told. Told as trials finish (Ray's OptunaSearch, the
`async` mode), its history, and so every later proposal, depends on the machine's load. Here
the variant's searcher proposes `batch_size` configs, then nothing until every trial of that
batch has *settled*, then tells the inner searcher all of their results in trial order (the
order it proposed them) and proposes the next batch. TPE with a fixed seed then sees the same
asks and tells in the same order, so it proposes the same configs, however loaded the machine.

A trial settles at the first rung of early stopping (every trial of the variant trains that
far, and the results there are at one common budget), or when it ends if it ends earlier or
there is no early stopping. Settling at the first rung is what lets synchronous halving
(`sptune.tuning.schedulers.halving`) work at all: its first rung waits for every trial of the variant, so a
batch that waited for its trials to *finish* would wait forever.
"""

from __future__ import annotations

from typing import Any

from ray.tune.search import Searcher


class BatchedSearcher(Searcher):
    """Wraps one variant's searcher (Optuna) so it proposes in batches of `batch_size`."""

    def __init__(self, inner: Searcher, batch_size: int, n_trials: int, settle_epoch: int | None) -> None:
        super().__init__(metric=inner.metric, mode=inner.mode)
        self.inner, self.batch_size, self.n_trials = inner, batch_size, n_trials
        self.settle_epoch = settle_epoch  # None: a trial settles when it ends
        self.proposed = 0
        self.batch: list[str] = []  # the current batch's trials, in the order they were proposed
        self.settled: dict[str, tuple[dict | None, bool]] = {}  # trial -> (result, error)

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict, **spec: Any) -> bool:
        return True  # the inner searcher was built with its own space, metric and mode

    def _batch_full(self) -> bool:
        """The current batch has all its trials (the last batch may be smaller)."""
        first = self.proposed - len(self.batch)
        return len(self.batch) >= min(self.batch_size, self.n_trials - first)

    def suggest(self, trial_id: str) -> dict[str, Any] | str | None:
        if self.proposed >= self.n_trials:
            return Searcher.FINISHED
        if self._batch_full():
            return None  # waiting for this batch: the caller asks another variant, or later
        config = self.inner.suggest(trial_id)
        if config not in (None, Searcher.FINISHED):
            self.batch.append(trial_id)
            self.proposed += 1
        return config

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        # Intermediate results are not forwarded: TPE learns from final values only.
        if self.settle_epoch is not None and result.get("training_iteration", 0) >= self.settle_epoch:
            self._settle(trial_id, result, False)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        self._settle(trial_id, result, error)  # ignored if it settled at the first rung

    def _settle(self, trial_id: str, result: dict | None, error: bool) -> None:
        if trial_id not in self.batch or trial_id in self.settled:
            return
        self.settled[trial_id] = (dict(result) if result else None, error)
        if self._batch_full() and len(self.settled) == len(self.batch):
            for done in self.batch:  # trial order, not finish order
                result, error = self.settled[done]
                self.inner.on_trial_complete(done, result=result, error=error)
            self.batch, self.settled = [], {}
