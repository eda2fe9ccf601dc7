"""The optimiser config a trial trains with: the device it asks for follows the GPUs it reserved."""

from __future__ import annotations

from pathlib import Path

import pytest

from sptune.rules.budgets import variant_budget
from sptune.spec import load_spec
from sptune.training.device import pick_device
from sptune.training.model_configs import optim_config

CONFIG = {"lr": 1e-3, "batch_size": 32}


def _optim(repo_root: str, *overrides: str):
    spec = load_spec(Path(repo_root) / "search_spaces" / "digits_quick.yaml", list(overrides))
    return optim_config(CONFIG, spec, variant_budget(spec, "scratch"), 0.0)


@pytest.mark.parametrize(
    "overrides,device",
    [
        # Recent Ray shows a trial every GPU even when it asked for none: "auto" must not pick one there.
        ((), "cpu"),
        (("resources.gpu=0",), "cpu"),
        (("resources.gpu=0.125",), "auto"),
        (("resources.gpu=1",), "auto"),
        (("training.device=cpu", "resources.gpu=1"), "cpu"),
        (("training.device=cuda", "resources.gpu=0.5"), "cuda"),
    ],
)
def test_a_trial_asks_for_a_gpu_only_where_it_reserved_one(repo_root, overrides, device):
    cfg = _optim(repo_root, *overrides)
    assert cfg.device == device
    if device == "cpu":
        assert pick_device(cfg.device).type == "cpu"  # on any machine, GPUs or not


@pytest.mark.parametrize(
    "overrides,pretrain_schedule",
    [((), "cosine"), (("pretrain.schedule=constant",), "constant"), (("training.schedule=constant",), "constant"),
     (("training.schedule=constant", "pretrain.schedule=cosine"), "cosine")],
)
def test_pretraining_takes_its_own_schedule_else_trainings(repo_root, overrides, pretrain_schedule):
    spec = load_spec(Path(repo_root) / "search_spaces" / "digits_quick.yaml", list(overrides))
    p = spec.pretrain
    cfg = optim_config(CONFIG, spec, spec.pretrain_budget(), p.weight_decay, p.warmup_steps, p.schedule)
    assert cfg.schedule == pretrain_schedule
    # Finetuning always follows training.schedule.
    assert optim_config(CONFIG, spec, variant_budget(spec, "scratch"), 0.0).schedule == spec.training.schedule


def test_a_pretraining_schedule_outside_the_two_shapes_is_refused(repo_root):
    from sptune.errors import SpecError

    with pytest.raises(SpecError, match="pretrain.schedule"):
        load_spec(Path(repo_root) / "search_spaces" / "digits_quick.yaml", ["pretrain.schedule=linear"])
