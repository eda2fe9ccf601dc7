"""A trial paused at a rung (checkpointed, its actor given to another trial, resumed later)
trains on exactly as one that went straight on: synchronous halving pauses some trials and not
others depending on arrival, so any difference would make decisions depend on timing."""

from __future__ import annotations

from ray.tune.trainable import trainable as ray_trainable

from sptune.plan.study_plan import build_plan
from sptune.plan.trial_budgets import trial_budgets
from sptune.spec import load_spec
from sptune.tasks import TaskRequest, load_task
from sptune.tuning.trainable import StudyTrainable

CONFIG = {"lr": 1e-3, "batch_size": 64, "variant": "scratch", "seed": 0, "phase": "search"}


def _trainable_class(repo_root: str) -> type:
    overrides = ["model.n_layers=1", "pretrain.epochs=0", "finetune.epochs=3", "scheduler.grace_period=1"]
    spec = load_spec(f"{repo_root}/search_spaces/digits_quick.yaml", overrides)
    data = load_task(TaskRequest("digits", {}, 0, None)).without_test()

    class Local(StudyTrainable):  # what tune.with_parameters does, without Ray's object store
        def setup(self, config: dict) -> None:
            super().setup(config, spec=spec, budgets=trial_budgets(build_plan(spec, data.info)), data=data)

    return Local


def test_pause_and_resume_on_a_reused_actor_changes_nothing(repo_root, tmp_path, monkeypatch):
    monkeypatch.setattr(ray_trainable, "DEFAULT_STORAGE_PATH", str(tmp_path))  # its log folders
    trainable = _trainable_class(repo_root)
    runner = trainable(CONFIG)
    straight = [runner.step()["val_loss"] for _ in range(3)]

    paused = trainable(CONFIG)
    first = paused.step()["val_loss"]
    paused.save_checkpoint(str(tmp_path))
    actor = trainable(dict(CONFIG, lr=5e-3))  # the actor trains another trial meanwhile ...
    actor.step()
    actor.reset_config(CONFIG)  # ... then resumes the paused one
    actor.load_checkpoint(str(tmp_path))
    resumed = [first] + [actor.step()["val_loss"] for _ in range(2)]
    assert resumed == straight
