"""The study's SearchGenerator: Tune's own, but a resumed study folder that was moved makes its new trials there.

Tune saves the generator's Experiment (and its StorageContext, the storage path) with every snapshot and, on
Tuner.restore, takes it back as it was: a trial the resumed study makes later (a stage that had not started) would
write and read under the old folder. Tune moves the restored *trials* itself (`Trial.set_storage`); this moves
the Experiment the same way, through the driver's folder moves (`sptune.storage.follow_folder_move`).
"""

from __future__ import annotations

from typing import Any

from ray.tune.search import ConcurrencyLimiter, Searcher, SearchGenerator

from sptune import storage as stored


class StudySearchGenerator(SearchGenerator):
    """`SearchGenerator(ConcurrencyLimiter(searcher, concurrency))`, as Tune would build from
    `TuneConfig(search_alg=searcher, max_concurrent_trials=concurrency)`; `concurrency` None: no limit."""

    def __init__(self, searcher: Searcher, concurrency: int | None) -> None:
        super().__init__(ConcurrencyLimiter(searcher, max_concurrent=concurrency) if concurrency else searcher)

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        storage = getattr(self._experiment, "storage", None)
        if storage is not None and not storage.custom_fs_provided:
            storage.storage_fs_path = stored.relocated(storage.storage_fs_path)
