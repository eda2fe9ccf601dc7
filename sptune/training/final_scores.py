"""The one test-split evaluation of a selected finetune checkpoint, on the device and precision its trial
trained with (not the driver's defaults: a driver on a GPU machine would otherwise test a CPU trial's
checkpoint in bf16)."""

from __future__ import annotations

from typing import NamedTuple

import torch

from sptune.spec import SweepSpec
from sptune.tasks.base import ArraySplit, TaskInfo
from sptune.training.checkpoint_files import load_state
from sptune.training.device import pick_device, precision_in_use, trial_device
from sptune.training.model_configs import variant_classifier_config
from sptune.training.scoring import score
from sptune.training.variants import build_for_evaluation


class HeldOutScore(NamedTuple):
    loss: float
    accuracy: float
    device: str  # where it was evaluated ("cpu" when the trial's GPU is not on the driver)
    precision: str  # "fp32" or "bf16": the trial's


def trial_device_and_precision(spec: SweepSpec, state: dict) -> tuple[str, str]:
    """What the checkpoint's trial trained with (recorded in its state); for a checkpoint without the record,
    the spec's settings resolved as a trial resolves them (`trial_device`)."""
    if "device_in_use" in state and "precision_in_use" in state:
        return str(state["device_in_use"]), str(state["precision_in_use"])
    device = pick_device(trial_device(spec.training.device, spec.resources.gpu))
    return device.type, precision_in_use(device, spec.training.precision)


def accuracy_on_test(
    spec: SweepSpec, info: TaskInfo, checkpoint_dir: str, test: ArraySplit, variant: str
) -> HeldOutScore:
    """Test loss and accuracy of the variant's classifier stored in ``checkpoint_dir``, and how it was run."""
    return accuracy_on(spec, info, checkpoint_dir, test, variant)


def accuracy_on(spec: SweepSpec, info: TaskInfo, checkpoint_dir: str, split: ArraySplit, variant: str) -> HeldOutScore:
    """Loss and accuracy of the variant's stored classifier on ``split``, in eval mode, on the device and
    precision its trial trained with."""
    state = load_state(checkpoint_dir)
    device_type, precision = trial_device_and_precision(spec, state)
    device = torch.device("cuda" if device_type == "cuda" and torch.cuda.is_available() else "cpu")
    cfg = variant_classifier_config(spec, info, variant)
    lm = spec.language_model
    model = build_for_evaluation(spec.variant_kind(variant), cfg, lm.path if lm else None)
    model.load_state_dict(state["model"])
    model.to(device)
    x, y = torch.from_numpy(split.x), torch.from_numpy(split.y).long()
    loss, acc = score(model, info, x, y, device, precision)
    return HeldOutScore(loss, acc, device.type, precision)
