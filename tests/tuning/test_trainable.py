"""The study's Ray Tune trainable, instantiated directly (no Tuner, no Ray cluster): resume and provenance."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from ray.tune.trainable import trainable as ray_trainable

from sptune.plan.trial_budgets import TrialBudgets
from sptune.rules.budgets import Budget
from sptune.spec import SweepSpec
from sptune.tasks.base import TaskInfo
from sptune.tracking.epoch_record import REPLAY_KEY, decode
from sptune.training.loops import OptimConfig
from tests.helpers_tiny import direct_trainable, random_splits

INFO = TaskInfo(name="px", input_kind="continuous", seq_len=16, num_classes=3, levels=17)
SEARCH = {"lr": {"type": "choice", "values": [1e-2]}, "batch_size": {"type": "choice", "values": [8]}}
SPEC = SweepSpec.model_validate(
    {
        "name": "trainables",
        "task": {"name": "px"},
        "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "d_ff": 32, "dropout": 0.2, "pooling": "mean"},
        "pretrain": {"epochs": 4, "num_samples": 1, "search": SEARCH},
        "finetune": {"epochs": 4, "num_samples": 1, "weight_decay": 0.01},
        # spt: the plan pretrains (PRETRAIN_CONFIG's trials take the pretraining budget the plan gives them).
        "variants": {"scratch": {"search": SEARCH}, "spt": {"search": SEARCH}},
        "training": {"device": "cpu"},
    }
)
CONFIG = {"variant": "scratch", "lr": 1e-2, "batch_size": 8, "seed": 5}
# A pretraining trial's config names its objective (what makes the trainable pretrain).
PRETRAIN_CONFIG = {**CONFIG, "phase": "pretrain", "variant": "masked", "objective": "masked"}


DATA = random_splits(INFO)


def _direct(spec: SweepSpec = SPEC, plan: TrialBudgets | None = None) -> type:
    """The trainable with its Tuner-supplied arguments (tune.with_parameters) filled in."""
    return direct_trainable(spec, INFO, DATA, plan)


@pytest.fixture(autouse=True)
def quiet_trainables(tmp_path, monkeypatch):
    # Outside a Tuner a Trainable makes its log folder under ~/ray_results: keep it in tmp.
    monkeypatch.setattr(ray_trainable, "DEFAULT_STORAGE_PATH", str(tmp_path / "ray_results"))
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)  # setup() sets the trial's thread count


def test_a_restored_trial_ends_with_the_same_weights_as_one_never_interrupted(tmp_path):
    trainable = _direct()
    straight = trainable(dict(CONFIG))
    results = [straight.train() for _ in range(4)]
    assert results[-1]["done"] and results[-1]["epoch"] == 4

    first_half = trainable(dict(CONFIG))
    first_half.train(), first_half.train()
    checkpoint = first_half.save_checkpoint(str(tmp_path))
    first_half.stop()

    torch.rand(1000)  # a reused actor's process RNG is wherever the last trial left it
    restored = trainable(dict(CONFIG))
    restored.load_checkpoint(checkpoint)
    last = [restored.train() for _ in range(2)][-1]

    assert last["epoch"] == 4 and last["done"]
    assert last["best_val_acc"] == results[-1]["best_val_acc"] and last["best_epoch"] == results[-1]["best_epoch"]
    for name, tensor in straight.loop.model.state_dict().items():
        assert torch.equal(restored.loop.model.state_dict()[name], tensor), name
    straight.stop(), restored.stop()


def test_a_restored_trials_first_result_replays_the_epochs_its_checkpoint_saw(tmp_path):
    """A driver that stops before writing a result to MLflow loses it; the checkpoint's copy brings it back."""
    trainable = _direct()
    first = trainable(dict(CONFIG))
    before = [first.train() for _ in range(2)]
    checkpoint = first.save_checkpoint(str(tmp_path))
    first.stop()

    restored = trainable(dict(CONFIG))
    restored.load_checkpoint(checkpoint)
    third, fourth = restored.train(), restored.train()
    replayed = decode(third)
    assert [row["epoch"] for row in replayed] == [1, 2]
    assert [row["loss"] for row in replayed] == [r["loss"] for r in before]
    assert [row["val_acc"] for row in replayed] == [r["val_acc"] for r in before]
    assert decode(fourth) == [] and REPLAY_KEY not in fourth  # once, on the first result after the restore
    restored.stop()


@pytest.mark.parametrize("config", [CONFIG, PRETRAIN_CONFIG], ids=["finetune", "pretrain"])
def test_each_result_reports_its_best_epochs_numbers(config):
    """best_val_loss is the val_loss of the epoch best_epoch names (for a finetuning trial, its best-accuracy
    epoch's): what halving breaks a tie at a rung with, as selection does from that epoch's checkpoint."""
    trial = _direct()(dict(config))
    results = [trial.train() for _ in range(4)]
    trial.stop()
    for result in results:
        best = results[result["best_epoch"] - 1]
        assert result["best_val_loss"] == best["val_loss"]
        if "objective" not in config:
            assert result["best_val_acc"] == best["val_acc"]
        else:
            assert "best_val_acc" not in result  # pretraining ranks by its loss alone


@pytest.mark.parametrize("config", [CONFIG, PRETRAIN_CONFIG], ids=["finetune", "pretrain"])
def test_the_first_epoch_reports_every_training_parameter(config):
    trial = _direct()(dict(config))
    first, second = trial.train(), trial.train()
    params = first["mlflow_params"]
    for field in dataclasses.fields(OptimConfig):
        assert f"optim.{field.name}" in params, field.name
    cfg = trial.loop.cfg
    assert params["optim.weight_decay"] == cfg.weight_decay and params["optim.betas"] == cfg.betas
    assert params["optim.device_in_use"] == "cpu" and params["optim.precision_in_use"] == "fp32"
    assert "mlflow_params" not in second  # once per trial
    for key in ("loss", "lr", "grad_norm", trial.loop.train_accuracy_key):
        assert key in first, key
    trial.stop()


def test_searched_weight_decay_warmup_and_dropout_and_the_specs_betas_reach_the_trial():
    spec = SPEC.model_copy(update={"training": SPEC.training.model_copy(update={"betas": (0.8, 0.99), "eps": 1e-6})})

    trial = _direct(spec)({**CONFIG, "weight_decay": 0.3, "warmup_fraction": 0.25, "dropout": 0.4})
    cfg = trial.loop.cfg
    assert (cfg.weight_decay, cfg.warmup_fraction, cfg.betas, cfg.eps) == (0.3, 0.25, (0.8, 0.99), 1e-6)
    dropouts = {m.p for m in trial.loop.model.modules() if isinstance(m, torch.nn.Dropout)}
    assert dropouts == {0.4}
    decayed = [g for g in trial.loop.optimizer.param_groups if g["weight_decay"] > 0]
    assert decayed and all(g["weight_decay"] == 0.3 and g["betas"] == (0.8, 0.99) for g in decayed)
    trial.stop()


def test_training_deterministic_reaches_torch_inside_the_trial():
    spec = SPEC.model_copy(update={"training": SPEC.training.model_copy(update={"deterministic": True})})

    try:
        trial = _direct(spec)(dict(CONFIG))
        assert trial.loop.cfg.deterministic and torch.are_deterministic_algorithms_enabled()
        assert trial.train()["mlflow_params"]["optim.deterministic"] is True
        trial.stop()
        plain = _direct()(dict(CONFIG))  # the spec's default: a reused actor is reset
        assert not torch.are_deterministic_algorithms_enabled()
        plain.stop()
    finally:
        torch.use_deterministic_algorithms(False)
        torch.backends.cudnn.deterministic = False


@pytest.mark.parametrize("config", [CONFIG, PRETRAIN_CONFIG], ids=["finetune", "pretrain"])
def test_a_trial_trains_the_budget_its_plan_gives_it_not_one_read_from_the_spec(config):
    """The spec says 4 epochs for both stages; the plan the trainable gets says 2: the trial ends after 2."""
    plan = TrialBudgets(Budget("epochs", 2), {"scratch": Budget("epochs", 2)})
    trial = _direct(plan=plan)(dict(config))
    results = [trial.train() for _ in range(2)]
    trial.stop()
    assert [r["done"] for r in results] == [False, True] and trial.loop.cfg.epochs == 2

