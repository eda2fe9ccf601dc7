"""The Tuner's parts rank trials by the number selection uses: each trial's best-so-far score; and its
trials read the study's data from one shared copy per node."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from ray import cloudpickle

import sptune.tuning.tuner
from sptune.judging.stage_graph import Stage
from sptune.plan.study_plan import build_plan
from sptune.spec import load_spec
from sptune.tasks.base import ArraySplit, TaskInfo, TaskSplits
from sptune.tuning.trainable import StudyTrainable
from sptune.tuning.tuner import build_study_tuner, staged_search


def _optuna_study(searcher):
    """The Optuna study inside a variant's searcher, whatever wraps it (limiters, batching)."""
    while not hasattr(searcher, "_ot_study"):
        searcher = getattr(searcher, "inner", None) or searcher.searcher
    return searcher._ot_study


@pytest.fixture
def plan(repo_root):
    spec = load_spec(Path(repo_root) / "search_spaces" / "digits_quick.yaml", [])
    return build_plan(spec, TaskInfo("digits", "continuous", 64, 10, levels=17), cluster_cpus=2)


def test_optuna_is_told_the_trials_best_epoch_not_its_last(plan):
    scratch = next(s for s in plan.variant_searches() if s.variant == "scratch")
    assert scratch.searcher == "optuna"
    searcher, _ = staged_search(plan, [Stage(scratch)], {}, {})
    # A whole first batch (searcher.batch_size trials), each trial's last epoch worse than its best.
    trials = [f"t_{i:05d}" for i in range(plan.spec.searcher.batch_size)]
    configs = [searcher.suggest(trial) for trial in trials]
    epochs = [(0.60, 0.60), (0.90, 0.90), (0.50, 0.90)]  # (val_acc, best_val_acc)
    for trial, config in zip(trials, configs, strict=True):
        for epoch, (acc, best) in enumerate(epochs, 1):
            result = {**config, "epoch": epoch, "training_iteration": epoch, "val_acc": acc, "best_val_acc": best}
            searcher.on_trial_result(trial, result)
        searcher.on_trial_complete(trial, result)
    completed = [t for t in _optuna_study(searcher.searchers[scratch.label]).trials if t.state.name == "COMPLETE"]
    assert [t.value for t in completed] == [0.90] * len(trials)  # selection would pick epoch 2 at 0.90


@pytest.mark.parametrize("overrides, joint", [([], False), (["searcher.multivariate=true"], True)])
def test_searcher_multivariate_gives_every_optuna_search_a_joint_tpe(repo_root, overrides, joint):
    from sptune.plan.dry_run_text import describe
    from sptune.study.spt_reuse import cache_key

    spec = load_spec(Path(repo_root) / "search_spaces" / "digits_quick.yaml", overrides)
    plan = build_plan(spec, TaskInfo("digits", "continuous", 64, 10, levels=17), cluster_cpus=2)
    searcher, _ = staged_search(plan, [Stage(s) for s in plan.variant_searches()], {}, {})
    samplers = [_optuna_study(s).sampler for s in searcher.pending.values()]
    assert samplers and all(s._multivariate is joint for s in samplers)
    assert ("multivariate TPE" in describe(plan)) is joint
    # The SPT cache key changes only when the option is on: caches written before it existed still match.
    key = cache_key(spec, plan.pretrainings()[0])
    assert (key == KEY_WITHOUT_THE_OPTION) is not joint


def test_a_searcher_batch_size_of_its_own_has_a_spt_cache_key_of_its_own(repo_root):
    """The batch size changes what the pretraining search proposes; the default keeps the key of caches
    written before the option existed."""
    from sptune.study.spt_reuse import cache_key

    def key(*overrides: str) -> str:
        spec = load_spec(Path(repo_root) / "search_spaces" / "digits_quick.yaml", list(overrides))
        plan = build_plan(spec, TaskInfo("digits", "continuous", 64, 10, levels=17), cluster_cpus=2)
        return cache_key(spec, plan.pretrainings()[0])

    assert key() == key("searcher.batch_size=4") == KEY_WITHOUT_THE_OPTION
    assert key("searcher.batch_size=2") != KEY_WITHOUT_THE_OPTION


def test_a_pretraining_schedule_of_its_own_has_a_spt_cache_key_of_its_own(repo_root):
    """pretrain.schedule changes what pretraining trains; unset, the key is that of caches written before it existed."""
    from sptune.study.spt_reuse import cache_key

    def key(*overrides: str) -> str:
        spec = load_spec(Path(repo_root) / "search_spaces" / "digits_quick.yaml", list(overrides))
        plan = build_plan(spec, TaskInfo("digits", "continuous", 64, 10, levels=17), cluster_cpus=2)
        return cache_key(spec, plan.pretrainings()[0])

    assert key() == KEY_WITHOUT_THE_OPTION
    assert len({key(), key("pretrain.schedule=cosine"), key("pretrain.schedule=constant")}) == 3


# digits_quick's SPT cache key as computed before `searcher.multivariate` existed, on digits' fixed sinusoidal
# position table (a checkpoint cached before pretrained another model and must not be reused: the key with rotary
# positions was ecbfe8f1cd099d43, with raw pixel values 907d98c156195f45).
KEY_WITHOUT_THE_OPTION = "22e8168ffb64f619"


# ---------------------------------------------------------------- one copy of the data per node


def _mapping_of(address: int) -> str:
    """The file backing the memory at `address` in this process ("" for anonymous memory)."""
    with open("/proc/self/maps") as f:
        for line in f:
            fields = line.split()
            low, high = (int(a, 16) for a in fields[0].split("-"))
            if low <= address < high:
                return fields[5] if len(fields) > 5 else ""
    return ""


class WhereIsMyData(StudyTrainable):
    """A real trial that also reports where its loop's training/validation tensors live."""

    def step(self) -> dict:
        result = super().step()
        loop = self.loop
        result["train_x_in"] = _mapping_of(loop.train_x.data_ptr())
        result["val_x_in"] = _mapping_of(loop.val_x.data_ptr())
        result["train_x_writeable"] = bool(self.data.train.x.flags.writeable)
        result["checksum"] = int(loop.train_x.sum())
        return result


@pytest.fixture
def cached_splits(tmp_path) -> TaskSplits:
    """Splits as the prepared cache hands them out: np.memmap (the case that used to be copied)."""
    rng = np.random.default_rng(0)
    for name, n in (("train", 4000), ("val", 500)):
        np.save(tmp_path / f"{name}_x.npy", rng.integers(0, 17, (n, 64)).astype(np.uint8))  # 256 kB: the shared store
        np.save(tmp_path / f"{name}_y.npy", rng.integers(0, 10, n))
    train, val = (
        ArraySplit(*(np.load(tmp_path / f"{s}_{a}.npy", mmap_mode="c") for a in "xy")) for s in ("train", "val")
    )
    return TaskSplits(TaskInfo("digits", "continuous", 64, 10, levels=17), train, val, lambda: None)


def test_concurrent_trials_train_on_the_one_shared_copy_in_the_object_store(
    ray_session, repo_root, cached_splits, tmp_path
):
    edits = ["finetune.epochs=1", "variants.scratch.num_samples=2", "scheduler.type=fifo", "model.n_layers=1"]
    edits += ["resources.cpu=0.5", "resources.max_concurrent=2"]  # both trials at once on 2 CPUs
    spec = load_spec(Path(repo_root) / "search_spaces" / "digits_quick.yaml", edits)
    two = build_plan(spec, cached_splits.info, cluster_cpus=2)
    scratch = next(s for s in two.variant_searches() if s.variant == "scratch")
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # Ray's workers cannot import this module
    original, sptune.tuning.tuner.StudyTrainable = sptune.tuning.tuner.StudyTrainable, WhereIsMyData
    try:
        # One object per study and Ray session, whichever Tuner asks (none pins a copy of its own).
        assert sptune.tuning.tuner.trial_data(cached_splits) is sptune.tuning.tuner.trial_data(cached_splits)
        searcher, scheduler = staged_search(two, [Stage(scratch)], {}, {})
        tuner = build_study_tuner(two, cached_splits, searcher, scheduler, str(tmp_path), [])
        results = [r.metrics for r in tuner.fit()]
    finally:
        sptune.tuning.tuner.StudyTrainable = original
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    assert len(results) == scratch.n_trials >= 2
    for metrics in results:
        # Each trial's loop reads Ray's shared-memory store itself: no private copy anywhere.
        assert "plasma" in metrics["train_x_in"] and "plasma" in metrics["val_x_in"], metrics
        assert metrics["train_x_writeable"] is False
        assert metrics["checksum"] == int(cached_splits.train.x.sum())


def test_the_tuners_concurrency_limit_counts_gpu_shares(repo_root):
    spec = load_spec(Path(repo_root) / "search_spaces" / "digits_quick.yaml", ["resources.gpu=0.125"])
    # 16 cores, one GPU: 8 trials of 1/8 GPU fit, not 16 (the old count from the CPUs alone).
    plan = build_plan(spec, TaskInfo("digits", "continuous", 64, 10, levels=17), cluster_cpus=16, cluster_gpus=1)
    searches = plan.variant_searches()
    _, scheduler = staged_search(plan, [Stage(s) for s in searches], {}, {})
    assert plan.concurrency == scheduler.max_concurrent == 8
