"""Dropout with a cheaper CPU mask than PyTorch's, and the same maths (docs/design/training.md).

PyTorch draws a CPU mask with `bernoulli_(1 - p)`, one double-precision uniform per element. Here the
mask is one 31-bit integer draw per element (`random_`, the same generator, so `TorchRngStream.own` and
the seeds govern it) compared with p * 2^31: a Bernoulli(1 - p) keep mask whose probability differs
from 1 - p by less than 2^-31. Kept values are scaled exactly as PyTorch scales them, so outputs and
gradients are the same function of the mask; only which elements a seed's stream drops differs.

In-place dropout and other devices keep PyTorch's kernel (fused on CUDA, with its own Philox stream).
"""

from __future__ import annotations

import torch
from torch import nn

_INT31 = 2**31  # int32 `random_()` draws uniformly from [0, 2^31)


def cpu_dropout(x: torch.Tensor, p: float) -> torch.Tensor:
    """Training-mode dropout of a CPU tensor with 0 < p < 1 (see the module's docstring)."""
    bits = torch.empty(x.shape, dtype=torch.int32).random_()
    noise = (bits >= round(p * _INT31)).to(x.dtype).div_(1 - p)  # PyTorch's scaling, to the bit
    return x * noise


class Dropout(nn.Dropout):
    """`nn.Dropout` (same arguments, same state) with the cheaper CPU mask."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        cheap = x.device.type == "cpu" and not self.inplace and 0.0 < self.p < 1.0
        if not (self.training and cheap):
            return super().forward(x)
        return cpu_dropout(x, self.p)
