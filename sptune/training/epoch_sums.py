"""What a training step reports (`BatchResult`), and an epoch's running sums of it kept on the device."""

from __future__ import annotations

from typing import NamedTuple

import torch


class BatchResult(NamedTuple):
    loss: torch.Tensor  # mean over the batch, differentiable
    hits: torch.Tensor  # correct predictions (0-d, on the device)
    scored: torch.Tensor | int  # predictions the hits are out of


class EpochSums:
    """Per-epoch running sums, kept on the device: reading them every step would stall a GPU.

    device: where the sums live; members: a pack's members, each sum then a ``[members]`` tensor (`split`)."""

    def __init__(self, device: torch.device, members: int | None = None) -> None:
        shape = () if members is None else (members,)
        self.loss, self.grad_norm, self.hits, self.scored = (torch.zeros(shape, device=device) for _ in range(4))
        self.examples = self.steps = 0

    def split(self) -> list[EpochSums]:
        """A pack's sums as each member's own (views of these)."""
        parts = []
        for k in range(len(self.loss)):
            part = EpochSums.__new__(EpochSums)
            part.loss, part.grad_norm, part.hits, part.scored = (t[k] for t in self.tensors())
            part.examples, part.steps = self.examples, self.steps
            parts.append(part)
        return parts

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return self.loss, self.grad_norm, self.hits, self.scored

    def add(self, batch: BatchResult, grad_norm: torch.Tensor, examples: int) -> None:
        self.loss += batch.loss.detach().float() * examples
        self.grad_norm += grad_norm.detach().float()
        self.hits += batch.hits
        self.scored += batch.scored
        self.examples, self.steps = self.examples + examples, self.steps + 1

    def means(self, accuracy_key: str) -> dict[str, float]:
        # One host sync for all four sums.
        loss, grad_norm, hits, scored = torch.stack([self.loss, self.grad_norm, self.hits, self.scored]).tolist()
        return {
            "loss": loss / max(self.examples, 1),
            "grad_norm": grad_norm / max(self.steps, 1),
            accuracy_key: hits / max(scored, 1),
        }
