"""The pack executor builds its members as the trainable does, with the folder moves of the member that created it:
in a study folder copied elsewhere and resumed there (`--resume --output NEW`, the old folder gone), a packed SPT
finetuning reads its pretrained checkpoint under the copy. Through a real detached actor on the shared Ray session,
as a member trial creates it (`executor_for`), and as the class alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sptune import storage
from sptune.rules.budgets import Budget
from sptune.tasks.base import ArraySplit, TaskSplits
from sptune.tasks.registry import TaskRequest, load_task
from sptune.training.checkpoint_files import STATE_FILE
from sptune.tuning.packs.executor import PackExecutor, executor_for
from sptune.tuning.packs.membership import PackSlot
from sptune.tuning.trial_jobs import Pretraining
from tests.helpers_matrix import build_spec

BUDGET = Budget("steps", 2, 2)
TRIAL = {"lr": 1e-2, "batch_size": 8, "seed": 0}


def _sealed() -> ArraySplit:
    raise AssertionError("an executor never reads a test split")


@pytest.fixture(scope="module")
def moved_study(tmp_path_factory):
    """(spec, data, config, moves): an SPT member's config naming its checkpoint under a folder that has since
    moved; the checkpoint exists only under the copy."""
    full = load_task(TaskRequest("digits"))
    cut = lambda split, n: ArraySplit(np.asarray(split.x[:n]), np.asarray(split.y[:n]))  # noqa: E731
    data = TaskSplits(full.info, cut(full.train, 16), cut(full.val, 8), _sealed)
    spec = build_spec("transformer", ["spt"])
    pretraining = Pretraining(spec, data, {**TRIAL, "objective": "masked"}, BUDGET)
    pretraining.loop.train_round()
    root = tmp_path_factory.mktemp("study")
    old, new = root / "old", root / "new"
    (new / "pretrain").mkdir(parents=True)
    torch.save(pretraining.loop.state_dict(), new / "pretrain" / STATE_FILE)
    config = {**TRIAL, "variant": "spt", "stage": "search-spt", "spt_checkpoint": str(old / "pretrain")}
    return spec, data, config, {str(old): str(new)}


@pytest.fixture
def no_moves():
    storage.set_moves({})
    yield
    storage.set_moves({})


def test_an_executor_built_with_the_moves_reads_the_checkpoint_under_the_copy(moved_study, no_moves):
    spec, data, config, moves = moved_study
    with pytest.raises(FileNotFoundError):
        PackExecutor("p", 1, spec, data).join(0, config, BUDGET)
    joined = PackExecutor("p", 1, spec, data, moves).join(0, config, BUDGET)
    assert joined["score_key"] == "val_acc" and joined["epoch"] == 0


def test_a_member_trial_hands_its_moves_to_the_executor_it_creates(moved_study, no_moves, ray_session):
    spec, data, config, moves = moved_study
    storage.set_moves(moves)  # what StudyTrainable.setup does with its driver's moves
    actor = executor_for(PackSlot("test-executor/moved/0", 0, 1), spec, data)
    try:
        joined = ray_session.get(actor.join.remote(0, config, BUDGET), timeout=120)
    finally:
        ray_session.kill(actor, no_restart=True)
    assert joined["score_key"] == "val_acc" and joined["epoch"] == 0
