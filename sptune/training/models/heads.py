"""Heads on top of the encoder: pooled classification and per-position reconstruction."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
from torch import nn

Pooling = Literal["mean", "max", "last", "cls"]


def pool(h: torch.Tensor, how: Pooling, key_padding: torch.Tensor | None = None) -> torch.Tensor:
    """(B, L, D) -> (B, D). ``key_padding`` (B, L) is True at padded positions."""
    if how == "cls":
        return h[:, 0]
    if key_padding is None:
        if how == "mean":
            return h.mean(dim=1)
        if how == "max":
            return h.amax(dim=1)
        if how == "last":
            return h[:, -1]
    else:
        keep = (~key_padding).unsqueeze(-1)
        if how == "mean":
            return (h * keep).sum(dim=1) / keep.sum(dim=1).clamp(min=1)
        if how == "max":
            return h.masked_fill(~keep, float("-inf")).amax(dim=1)
        if how == "last":
            last = keep.squeeze(-1).long().sum(dim=1).clamp(min=1) - 1
            return h[torch.arange(len(h), device=h.device), last]
    raise ValueError(f"unknown pooling '{how}'")


class ClassificationHead(nn.Module):
    def __init__(self, d_model: int, num_classes: int, pooling: Pooling, paired: bool = False) -> None:
        super().__init__()
        self.pooling = pooling
        self.paired = paired
        # Paired inputs (retrieval) are compared as [a, b, a - b, a * b].
        d_in = 4 * d_model if paired else d_model
        self.mlp = nn.Sequential(nn.Linear(d_in, d_model), nn.GELU(), nn.Linear(d_model, num_classes))

    def forward(self, pooled: torch.Tensor, pooled_b: torch.Tensor | None = None) -> torch.Tensor:
        if self.paired:
            pooled = torch.cat([pooled, pooled_b, pooled - pooled_b, pooled * pooled_b], dim=-1)
        return self.mlp(pooled)


class ReconstructionHead(nn.Module):
    """Per-position predictions: logits over tokens / pixel levels, or one regressed value."""

    def __init__(self, d_model: int, out_dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(d_model, out_dim)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if self.proj.out_features > 1:
            return self.proj(h)
        # A regressed value stays fp32 under autocast: bf16 resolves 1/256 of its range near 1, as coarse
        # as the pixel levels the value is compared against (and rounded to, for hits).
        with torch.autocast(h.device.type, enabled=False):
            return self.proj(h.float())


def classify(
    encode: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor],
    head: ClassificationHead,
    inputs: torch.Tensor,
    key_padding: torch.Tensor | None,
) -> torch.Tensor:
    """Pooled encoding -> logits; paired inputs (B, 2, L[, C]) share the encoder."""
    if not head.paired:
        return head(encode(inputs, key_padding))
    pad_a = key_padding[:, 0] if key_padding is not None else None
    pad_b = key_padding[:, 1] if key_padding is not None else None
    return head(encode(inputs[:, 0], pad_a), encode(inputs[:, 1], pad_b))
