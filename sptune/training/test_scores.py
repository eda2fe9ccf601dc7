"""The one test-split evaluation of a selected finetune checkpoint."""

from __future__ import annotations

import torch

from sptune.spec import SweepSpec
from sptune.tasks.base import ArraySplit, TaskInfo
from sptune.training.checkpoint_files import load_state
from sptune.training.device import pick_device
from sptune.training.loops import score
from sptune.training.model_configs import variant_classifier_config
from sptune.training.variants import build_for_evaluation


def accuracy_on_test(
    spec: SweepSpec, info: TaskInfo, checkpoint_dir: str, test: ArraySplit, variant: str
) -> tuple[float, float]:
    """(test loss, test accuracy) of the variant's classifier stored in ``checkpoint_dir``."""
    device = pick_device(spec.training.device)
    cfg = variant_classifier_config(spec, info, variant)
    lm = spec.language_model
    model = build_for_evaluation(spec.variant_kind(variant), cfg, lm.path if lm else None)
    model.load_state_dict(load_state(checkpoint_dir)["model"])
    model.to(device)
    x, y = torch.from_numpy(test.x), torch.from_numpy(test.y).long()
    return score(model, info, x, y, device, spec.training.precision)


