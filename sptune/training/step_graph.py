"""`training.compile: cuda_graphs`: the whole training step (forward, backward, clipping, optimizer) as one
CUDA graph, replayed once per full batch (docs/design/training.md, "The whole step as one CUDA graph").

A small model's step is ~200 kernel launches for ~2 ms of GPU work, so the host, not the GPU, sets the pace;
a replay is one launch. What a graph needs, and where it comes from:
- fixed addresses: the step reads its inputs from static buffers, copied into before each replay, and writes
  its outputs (loss, hits, gradient norm) into tensors that each replay overwrites;
- fixed shapes: only full batches replay; an epoch's last, smaller batch runs the same step eagerly;
- nothing decided on the host inside it: the learning rate is a device tensor that the schedule fills between
  replays, AdamW is `capturable`, gradients are zeroed in place (never set to None: the graph holds them);
- warm-up before capture: the first steps run eagerly on a side stream (cuBLAS workspaces, AdamW's state,
  autograd's lazy set-up are made there, not inside the graph). They are real training steps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

# Eager steps before the capture: PyTorch's recipe warms up "a few" iterations; 3 is its example's count.
WARMUP_STEPS = 3

Step = Callable[[Sequence[torch.Tensor]], Any]


class CapturedStep:
    """``step(inputs) -> outputs`` (any nesting of tensors and numbers), run eagerly on a side stream for its
    first `WARMUP_STEPS` calls, then captured once and replayed. Every call is one real training step.

    The caller passes only inputs of one shape (full batches) and runs the others eagerly with the same ``step``:
    a graph replays the shapes it was captured with, and nothing else."""

    def __init__(self, step: Step) -> None:
        self.step = step
        self.graph: torch.cuda.CUDAGraph | None = None
        self.static_inputs: list[torch.Tensor] = []
        self.outputs: Any = None
        self.warm_steps = 0
        self.replay_count = 0

    def __call__(self, inputs: Sequence[torch.Tensor]) -> Any:
        if self.graph is None and self.warm_steps < WARMUP_STEPS:
            self.warm_steps += 1
            return self._on_side_stream(inputs)
        if self.graph is None:
            self._capture(inputs)
        for static, new in zip(self.static_inputs, inputs, strict=True):
            if static.shape != new.shape or static.dtype != new.dtype:
                raise ValueError(
                    f"a captured step replays {tuple(static.shape)} {static.dtype} inputs only, "
                    f"not {tuple(new.shape)} {new.dtype}: run other shapes eagerly"
                )
            static.copy_(new, non_blocking=True)
        self.graph.replay()
        self.replay_count += 1
        return self.outputs

    def _on_side_stream(self, inputs: Sequence[torch.Tensor]) -> Any:
        side, main = torch.cuda.Stream(), torch.cuda.current_stream()
        side.wait_stream(main)
        with torch.cuda.stream(side):
            out = self.step(inputs)
        main.wait_stream(side)
        return out

    def _capture(self, inputs: Sequence[torch.Tensor]) -> None:
        """Records the step on the static buffers; nothing runs until the first replay."""
        self.static_inputs = [t.clone() for t in inputs]
        torch.cuda.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.outputs = self.step(self.static_inputs)

    def reset(self) -> None:
        """Forget the graph (e.g. the optimizer's state tensors were replaced by a checkpoint's)."""
        self.graph, self.static_inputs, self.outputs, self.warm_steps = None, [], None, 0
