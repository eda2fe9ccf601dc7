"""Dropout whose noise is handed in: how a pack gives each member its own dropout stream.

A random op in the pack's forward would draw one tensor for all members' rows from the process's RNG, so no
member would see the draws it makes alone. A pack therefore draws each member's noise before the forward, under
that member's own RNG stream, by applying the member's own dropout module to ones of its batch's shape (the same
kernel, generator and shape as its solo forward: the same bits), and the forward multiplies by the members' noise,
folded as their rows are, here.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import torch
from torch import nn


@dataclass(frozen=True)
class NoiseSpec:
    """One dropout call of a forward pass: what its noise must look like."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    module: nn.Dropout  # draws the noise (the solo model's own module type and p)


@dataclass
class NoiseFeed:
    """The noise of one forward pass, consumed in call order; or, while recording, the calls' specs."""

    recording: bool = False
    specs: list[NoiseSpec] = field(default_factory=list)
    queue: list[torch.Tensor] = field(default_factory=list)


class FedDropout(nn.Module):
    """Stands in for one dropout module of the pack's template model (see the module's docstring)."""

    def __init__(self, original: nn.Dropout, feed: NoiseFeed) -> None:
        super().__init__()
        self.original, self.feed = original, feed

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.original.p == 0.0:
            return x  # as nn.Dropout: no draw (PyTorch returns the input for p == 0 without touching the RNG)
        if self.feed.recording:
            self.feed.specs.append(NoiseSpec(tuple(x.shape), x.dtype, self.original))
            return x
        return x * self.feed.queue.pop(0)


def fed_template(model: nn.Module, feed: NoiseFeed) -> nn.Module:
    """A copy of ``model`` (structure and buffers; its parameters are replaced at every call) whose dropout
    modules take their noise from ``feed``."""
    template = copy.deepcopy(model)
    for parent in list(template.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, nn.Dropout):
                setattr(parent, name, FedDropout(child, feed))
    return template


def draw_noise(specs: list[NoiseSpec], device: torch.device) -> list[torch.Tensor]:
    """One member's noise for one forward pass, drawn from the RNG stream in place (the caller's `own()`)."""
    return [spec.module.train()(torch.ones(spec.shape, dtype=spec.dtype, device=device)) for spec in specs]
