"""Denoising objectives: masking, model inputs, reconstruction targets and losses.

Masks are drawn afresh every time a batch is served (never frozen), and the loss is
computed on masked positions only. A masked position's value never reaches the model:
tokens become the `<mask>` id, continuous values are set to the (standardised) mean 0 and flagged in a mask
channel. Reconstruction targets stay in the task's own units, x / (levels - 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

from sptune.tasks.base import TaskInfo

Loss = Literal["ce", "l1", "l2"]


def padding_of(x: torch.Tensor, info: TaskInfo) -> torch.Tensor | None:
    """True where a token task's sequence is padding (all False where none is); None for dense inputs.

    Never asks whether any position is padded: on a GPU the answer would be read back to the host
    once per batch. Whether a task pads at all is decided once per loop (`has_padding`)."""
    if info.input_kind != "tokens":
        return None
    return x == info.pad_id


def has_padding(info: TaskInfo, *splits: torch.Tensor) -> bool:
    """Whether any of a token task's sequences is padded (one read-back, where a loop is built)."""
    return info.input_kind == "tokens" and any(bool((x == info.pad_id).any()) for x in splits)


def draw_mask(
    shape: torch.Size,
    ratio: float,
    generator: torch.Generator,
    padding: torch.Tensor | None = None,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """Each position masked independently with probability ``ratio``; padding never masked.

    Drawn by ``generator`` where it lives (a loop's CPU stream: the same masks on any device, and a
    checkpoint resumes them exactly), then placed on ``device`` (default: the padding's, else the
    generator's). A CPU draw bound for a GPU goes through pinned memory, so the copy does not block."""
    device = torch.device(device) if device is not None else padding.device if padding is not None else None
    pin = device is not None and device.type == "cuda" and generator.device.type == "cpu"
    mask = torch.empty(shape, dtype=torch.bool, device=generator.device, pin_memory=pin)
    torch.lt(torch.rand(shape, generator=generator, device=generator.device), ratio, out=mask)
    if device is not None:
        mask = mask.to(device, non_blocking=pin)
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


def member_sums(t: torch.Tensor, members: int | None) -> torch.Tensor:
    """``t``'s sum; with ``members``, rows of that many members folded into one batch (member-major, a pack's
    layout), each member's sum (``[members]``)."""
    return t.sum() if members is None else t.reshape(members, -1).sum(1)


def reconstruction_loss(
    pred: torch.Tensor, target: torch.Tensor, where: torch.Tensor, loss: Loss, members: int | None = None
) -> torch.Tensor:
    """Mean loss over the positions selected by ``where`` (B, L) only; 0 (with zero gradients) where none is;
    with ``members`` each member's mean (`member_sums`).

    Every position's loss is computed and the unselected ones zeroed: a boolean gather (or asking whether
    anything is selected) would read a count back to the host each step and stall a GPU."""
    if loss == "ce":
        per = F.cross_entropy(pred.flatten(0, -2).float(), target.flatten(), reduction="none").view_as(where)
    else:
        diff = pred.squeeze(-1).float() - target
        per = diff.abs() if loss == "l1" else diff**2
    # where(), not a product: a non-finite prediction at an unselected position must not reach the mean.
    return member_sums(torch.where(where, per, 0.0), members) / member_sums(where, members).clamp(min=1)


def reconstruction_hits(
    pred: torch.Tensor,
    target: torch.Tensor,
    where: torch.Tensor,
    loss: Loss,
    info: TaskInfo,
    members: int | None = None,
) -> torch.Tensor:
    """Correct predictions at selected positions (exact level for regression, rounded).

    A 0-d tensor on pred's device: training sums it every step, and reading it as a
    number there would stall a GPU once per step (so would a boolean gather)."""
    if loss == "ce":
        guess = pred.argmax(-1)
    else:
        guess = torch.round(pred.squeeze(-1).float().clamp(0, 1) * (info.levels - 1))
        target = torch.round(target * (info.levels - 1))
    return member_sums((guess == target.long()) & where, members)


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


@dataclass(frozen=True)
class PretrainObjective:
    kind: str = "masked"  # masked | causal
    mask_ratio: float = 0.5
    loss: str = "l2"
