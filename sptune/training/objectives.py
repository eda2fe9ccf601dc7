"""Denoising objectives: masking, model inputs, reconstruction targets and losses.

Masks are drawn afresh every time a batch is served (never frozen), and the loss is
computed on masked positions only. A masked position's value never reaches the model:
tokens become the `<mask>` id, continuous values are set to the (standardised) mean 0 and flagged in a mask
channel. Reconstruction targets stay in the task's own units, x / (levels - 1).
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from sptune.tasks.base import TaskInfo

Loss = Literal["ce", "l1", "l2"]


def padding_of(x: torch.Tensor, info: TaskInfo) -> torch.Tensor | None:
    """True where a token task's sequence is padding; None for dense inputs."""
    if info.input_kind != "tokens":
        return None
    pad = x == info.pad_id
    return pad if bool(pad.any()) else None


def draw_mask(
    shape: torch.Size, ratio: float, generator: torch.Generator, padding: torch.Tensor | None = None
) -> torch.Tensor:
    """Each position masked independently with probability ``ratio``; padding never masked."""
    mask = torch.rand(shape, generator=generator, device=generator.device) < ratio
    if padding is not None:
        mask &= ~padding
    return mask


def model_inputs(x: torch.Tensor, info: TaskInfo, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Raw task values -> what the encoder consumes, hiding masked positions."""
    if info.input_kind == "tokens":
        ids = x.long()
        return ids.masked_fill(mask, info.mask_id) if mask is not None else ids
    # Standardised with the training split's statistics (sptune.tasks.value_stats): a masked value becomes
    # 0, the training mean, and its flag says it is hidden.
    values = (x.float() / (info.levels - 1) - info.value_mean) / info.value_std
    flags = torch.zeros_like(values)
    if mask is not None:
        values = values.masked_fill(mask, 0.0)
        flags = mask.float()
    return torch.stack([values, flags], dim=-1)


def output_dim(info: TaskInfo, loss: Loss) -> int:
    if loss == "ce":
        return info.vocab_size if info.input_kind == "tokens" else info.levels
    return 1


def targets_for(x: torch.Tensor, info: TaskInfo, loss: Loss) -> torch.Tensor:
    if loss == "ce":
        return x.long()
    return x.float() / (info.levels - 1)


def reconstruction_loss(pred: torch.Tensor, target: torch.Tensor, where: torch.Tensor, loss: Loss) -> torch.Tensor:
    """Mean loss over the positions selected by ``where`` (B, L) only."""
    if not bool(where.any()):
        return pred.sum() * 0.0
    if loss == "ce":
        return F.cross_entropy(pred[where].float(), target[where])
    diff = pred.squeeze(-1)[where].float() - target[where]
    return diff.abs().mean() if loss == "l1" else (diff**2).mean()


def reconstruction_hits(
    pred: torch.Tensor, target: torch.Tensor, where: torch.Tensor, loss: Loss, info: TaskInfo
) -> torch.Tensor:
    """Correct predictions at selected positions (exact level for regression, rounded).

    A 0-d tensor on pred's device: training sums it every step, and reading it as a
    number there would stall a GPU once per step."""
    if loss == "ce":
        guess = pred[where].argmax(-1)
    else:
        guess = torch.round(pred.squeeze(-1)[where].float().clamp(0, 1) * (info.levels - 1))
        target = torch.round(target * (info.levels - 1))
    return (guess == target[where].long()).sum()


def causal_positions(x: torch.Tensor, info: TaskInfo) -> torch.Tensor:
    """Positions whose next element is a target: all but the last (and not padding)."""
    where = torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
    where[:, -1] = False
    padding = padding_of(x, info)
    if padding is not None:
        where &= ~padding
        where[:, :-1] &= ~padding[:, 1:]
    return where


def shift_left(t: torch.Tensor) -> torch.Tensor:
    """Next-element targets: position i holds element i + 1 (last position is unused)."""
    return torch.cat([t[:, 1:], t[:, -1:]], dim=1)
