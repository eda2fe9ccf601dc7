"""The trivial predictors' validation scores, in the units SPT's own checkpoint is selected by.

Regression objectives (l1, l2) are selected by validation loss in the target's units, so each predictor's
loss is reported (``trivial_<name>_loss``); cross-entropy ones by masked accuracy (``trivial_<name>_acc``).
``trivial_best`` is the best of them in that unit: the score a pretraining must beat to have learned more
than a neighbour average (sptune.report.flags raises the flag)."""

from __future__ import annotations

import torch

from sptune.judging.trivial_check import TRIVIAL_BEST
from sptune.tasks.base import TaskInfo
from sptune.training import objectives as obj
from sptune.training.trivial_predictors import masked_predictions, most_frequent_token, next_element_predictions

__all__ = ["TrivialScores", "most_frequent_token", "lower_is_better"]


def lower_is_better(loss: str) -> bool:
    """Whether the trivial scores of an objective with this loss are losses (l1, l2), not accuracies (ce)."""
    return loss != "ce"


class TrivialScores:
    """Sums of each trivial predictor's loss (or hits) over validation batches, then their means."""

    def __init__(self, info: TaskInfo, objective, most_frequent: int) -> None:
        self.info, self.objective, self.most_frequent = info, objective, most_frequent
        self.sums: dict[str, float] = {}
        self.count = 0

    def add(self, x: torch.Tensor, where: torch.Tensor) -> None:
        targets = obj.targets_for(x, self.info, "l1" if self.info.input_kind == "continuous" else "ce")
        if self.objective.kind == "causal":
            predictions, targets = next_element_predictions(x, self.info, self.most_frequent), obj.shift_left(targets)
        else:
            predictions = masked_predictions(x, where, self.info, self.most_frequent)
        for name, pred in predictions.items():
            self.sums[name] = self.sums.get(name, 0.0) + self._score(pred, targets, where)
        self.count += int(where.sum())

    def _score(self, pred: torch.Tensor, target: torch.Tensor, where: torch.Tensor) -> float:
        loss = self.objective.loss
        if not lower_is_better(loss):  # hits: exact tokens, or exact pixel levels
            if self.info.input_kind == "continuous":
                scale = self.info.levels - 1
                pred, target = torch.round(pred * scale).long(), torch.round(target * scale).long()
            return float(((pred == target) & where).sum())
        diff = (pred.float() - target.float()).masked_fill(~where, 0.0)
        return float(diff.abs().sum() if loss == "l1" else (diff**2).sum())

    def means(self) -> dict[str, float]:
        unit = "loss" if lower_is_better(self.objective.loss) else "acc"
        scores = {f"trivial_{name}_{unit}": total / max(self.count, 1) for name, total in self.sums.items()}
        pick = min if lower_is_better(self.objective.loss) else max
        return {**scores, TRIVIAL_BEST: pick(scores.values())} if scores else {}
