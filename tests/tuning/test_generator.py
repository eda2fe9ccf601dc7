"""A resumed study whose folder was moved makes its new trials in the copy: the Experiment Tune restores with its
SearchGenerator (and the storage path in it) is moved as the trials are."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from ray.train._internal.storage import StorageContext
from ray.tune.search import ConcurrencyLimiter, Searcher, SearchGenerator

from sptune import storage
from sptune.tuning.generator import StudySearchGenerator


@pytest.fixture
def moved(tmp_path):
    """A study folder `old` copied to `new`, the driver following the move; no move afterwards."""
    old, new = tmp_path / "old", tmp_path / "new"
    storage.follow_folder_move(old, new)
    yield old, new
    storage.set_moves({})


def _saved_state(folder) -> dict:
    """What a SearchGenerator's snapshot holds: its counts and the Experiment, storage path included."""
    context = StorageContext(storage_path=str(folder / "ray_results"), experiment_dir_name="study")
    return {"counter": 3, "total_samples": 9, "finished": False, "experiment": SimpleNamespace(storage=context)}


def test_a_restored_experiment_writes_under_the_copy(moved):
    old, new = moved
    generator = StudySearchGenerator(Searcher(), concurrency=2)
    generator.set_state(_saved_state(old))
    assert generator._experiment.storage.storage_fs_path == str((new / "ray_results").resolve())
    assert generator._experiment.storage.experiment_fs_path.startswith(str(new.resolve()))
    assert generator._counter == 3 and generator.total_samples == 9


def test_tunes_own_generator_keeps_the_old_folder(moved):
    """Why the study has its own: Ray's takes the saved Experiment back as it was."""
    old, _ = moved
    generator = SearchGenerator(Searcher())
    generator.set_state(_saved_state(old))
    assert generator._experiment.storage.storage_fs_path == str(old / "ray_results")


def test_an_unmoved_study_keeps_its_folder(tmp_path):
    generator = StudySearchGenerator(Searcher(), concurrency=None)
    generator.set_state(_saved_state(tmp_path))
    assert generator._experiment.storage.storage_fs_path == str(tmp_path / "ray_results")
    assert not isinstance(generator.searcher, ConcurrencyLimiter)


def test_the_concurrency_limit_wraps_the_searcher_as_tune_would():
    generator = StudySearchGenerator(Searcher(), concurrency=4)
    assert isinstance(generator.searcher, ConcurrencyLimiter) and generator.searcher.max_concurrent == 4
