"""A classifier's loss and accuracy on a split: each finetuning epoch's validation, and the one test."""

from __future__ import annotations

import torch
from torch import nn

from sptune.tasks.base import TaskInfo
from sptune.training import objectives as obj
from sptune.training.device import autocast

EVAL_BATCH = 256


@torch.no_grad()
def score(
    model: nn.Module, info: TaskInfo, x: torch.Tensor, y: torch.Tensor, device: torch.device, precision: str = "auto"
) -> tuple[float, float]:
    """Mean cross-entropy and accuracy of a classifier on (x, y)."""
    model.eval()
    loss_sum, correct = 0.0, 0
    for xb, yb in zip(x.split(EVAL_BATCH), y.split(EVAL_BATCH), strict=False):
        xb, yb = xb.to(device), yb.to(device)
        padding = obj.padding_of(xb, info)
        if padding is not None and not bool(padding.any()):  # evaluation reads numbers back anyway
            padding = None  # no mask: flash-attn may run
        with autocast(device, precision):
            logits = model(obj.model_inputs(xb, info), padding).float()
        loss_sum += float(nn.functional.cross_entropy(logits, yb, reduction="sum"))
        correct += int((logits.argmax(-1) == yb).sum())
    return loss_sum / max(len(y), 1), correct / max(len(y), 1)
