"""The order a training loop serves its rows in: shuffled passes, continued across rounds (`sptune.training.loops`)."""

from __future__ import annotations

import torch

from sptune.training.device_data import to_device_async


class BatchOrder:
    """Row indices, a batch at a time, from shuffled passes over ``n_rows`` rows.

    A pass's order is drawn from ``generator`` when the previous pass is used up, so a steps budget's rounds,
    which may end inside a pass, continue it; `position` and `load` carry a pass in progress through a checkpoint.
    """

    def __init__(self, n_rows: int, batch_size: int, generator: torch.Generator, device: torch.device) -> None:
        self.n_rows, self.batch_size = n_rows, batch_size
        self.generator, self.device = generator, device
        self.order: torch.Tensor | None = None
        self.cursor = 0

    def next(self) -> torch.Tensor:
        """The next batch of row indices (on the device)."""
        if self.order is None or self.cursor >= len(self.order):
            self.order = to_device_async(torch.randperm(self.n_rows, generator=self.generator), self.device)
            self.cursor = 0
        idx = self.order[self.cursor:self.cursor + self.batch_size]
        self.cursor += len(idx)
        return idx

    def restart(self) -> None:
        """Forget the pass in progress: the next batch starts a new one."""
        self.order, self.cursor = None, 0

    def position(self) -> dict:
        """Mid-pass, the pass's order and cursor (for a checkpoint); nothing between passes."""
        if self.order is not None and self.cursor < len(self.order):
            return {"data_order": self.order.cpu(), "data_cursor": self.cursor}
        return {}

    def load(self, state: dict) -> None:
        order = state.get("data_order")
        self.order = None if order is None else order.to(self.device)
        self.cursor = int(state.get("data_cursor", 0))
