"""Predictors that need no training, scored on the same validation masks as SPT's checkpoint.

A pretraining that does not beat them learned no structure of the data beyond what a neighbour average (or the
nearest visible token) already gives; a finetuning comparison that starts from it tests an untrained prior. Each
function takes a batch of raw task values ``x`` (B, L) and the positions to predict ``where`` (B, L) and returns
per-position predictions in the target's units (x / (levels - 1) for pixels, ids for tokens).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from sptune.tasks.base import TaskInfo


def _visible_mean(values: torch.Tensor, visible: torch.Tensor, fallback: float) -> torch.Tensor:
    """Each sequence's mean over its visible positions, broadcast to (B, L); ``fallback`` where none is."""
    count = visible.sum(dim=1, keepdim=True)
    total = (values * visible).sum(dim=1, keepdim=True)
    mean = torch.where(count > 0, total / count.clamp(min=1), torch.full_like(total, fallback))
    return mean.expand_as(values)


def _neighbour_mean(values: torch.Tensor, visible: torch.Tensor, side: int, fallback: torch.Tensor) -> torch.Tensor:
    """The average of the visible 4-neighbours in a ``side`` x ``side`` image (left/right in a 1-D sequence when
    ``side`` is 0); ``fallback`` where no neighbour is visible."""
    shape = values.shape
    if side:
        v, m = values.reshape(-1, 1, side, side), visible.reshape(-1, 1, side, side).to(values.dtype)
        kernel = torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 1.0], [0.0, 1.0, 0.0]], dtype=values.dtype,
                              device=values.device).reshape(1, 1, 3, 3)
        total, count = F.conv2d(v * m, kernel, padding=1), F.conv2d(m, kernel, padding=1)
    else:
        v, m = values.reshape(-1, 1, shape[-1]), visible.reshape(-1, 1, shape[-1]).to(values.dtype)
        kernel = torch.tensor([1.0, 0.0, 1.0], dtype=values.dtype, device=values.device).reshape(1, 1, 3)
        total, count = F.conv1d(v * m, kernel, padding=1), F.conv1d(m, kernel, padding=1)
    total, count = total.reshape(shape), count.reshape(shape)
    return torch.where(count > 0, total / count.clamp(min=1), fallback)


def _nearest_visible(ids: torch.Tensor, visible: torch.Tensor, fallback: int) -> torch.Tensor:
    """Each position's nearest visible token (the left one on a tie); ``fallback`` where a row has none."""
    length = ids.shape[1]
    index = torch.arange(length, device=ids.device).expand_as(ids)
    left = torch.where(visible, index, torch.full_like(index, -1)).cummax(dim=1).values
    right_flipped = torch.where(visible, length - 1 - index, torch.full_like(index, -1)).flip(1).cummax(dim=1).values
    right = (length - 1 - right_flipped.flip(1)).masked_fill(right_flipped.flip(1) < 0, length * 3)
    left_gap = torch.where(left >= 0, index - left, torch.full_like(index, length * 3))
    pick = torch.where(left_gap <= right - index, left, right).clamp(0, length - 1)
    found = (left >= 0) | (right < length)
    return torch.where(found, ids.gather(1, pick), torch.full_like(ids, fallback))


def masked_predictions(
    x: torch.Tensor, where: torch.Tensor, info: TaskInfo, most_frequent: int = 0
) -> dict[str, torch.Tensor]:
    """Trivial predictions of the masked positions ``where`` from the visible ones, by name.

    Pixels: ``visible_mean`` (the image's mean visible value) and ``neighbour_mean`` (the average of the
    visible neighbours). Tokens: ``most_frequent`` (the training split's most frequent token) and
    ``nearest_visible`` (the nearest unmasked, unpadded token)."""
    if info.input_kind == "tokens":
        visible = ~where & (x != info.pad_id)
        return {"most_frequent": torch.full_like(x.long(), most_frequent),
                "nearest_visible": _nearest_visible(x.long(), visible, most_frequent)}
    values, visible = x.float() / (info.levels - 1), ~where
    mean = _visible_mean(values, visible, info.value_mean)
    return {"visible_mean": mean, "neighbour_mean": _neighbour_mean(values, visible, info.image_side, mean)}


def next_element_predictions(x: torch.Tensor, info: TaskInfo, most_frequent: int = 0) -> dict[str, torch.Tensor]:
    """Trivial predictions of the next element (causal objective) at every position: the current element
    (``repeat_last``), and for tokens the training split's most frequent token."""
    current = x.long() if info.input_kind == "tokens" else x.float() / (info.levels - 1)
    found = {"repeat_last": current}
    if info.input_kind == "tokens":
        found["most_frequent"] = torch.full_like(current, most_frequent)
    return found


def most_frequent_token(x: torch.Tensor, info: TaskInfo) -> int:
    """The training split's most frequent token other than padding and the mask id (0 for pixel tasks)."""
    if info.input_kind != "tokens":
        return 0
    counts = torch.bincount(x.reshape(-1).long(), minlength=max(info.vocab_size, 1))
    counts[[info.pad_id, info.mask_id]] = -1
    return int(counts.argmax())
