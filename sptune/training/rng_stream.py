"""A training loop's own torch RNG stream, kept apart from the process's (`sptune.training.loops`)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


class TorchRngStream:
    """The torch RNG states (CPU, and CUDA when training there) one loop's dropout draws from.

    Dropout draws from the process-wide torch RNG. Anything else in the process may advance it between epochs
    (a reused Ray actor building the next trial, another loop), so the loop swaps its saved state in for its epoch
    and out after (`own`): the stream then depends on this loop's history alone, and its checkpoint resumes it
    exactly. It starts at the process's state when built (the caller seeds it first)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.states = self._current()

    def _current(self) -> dict[str, torch.Tensor]:
        """The process's torch RNG states this stream covers (uint8 CPU tensors)."""
        states = {"torch_rng": torch.get_rng_state()}
        if self.device.type == "cuda":
            states["cuda_rng"] = torch.cuda.get_rng_state(self.device)
        return states

    @contextlib.contextmanager
    def own(self) -> Iterator[None]:
        """Run with this stream in place of the process's RNG, restoring the process's on the way out."""
        cuda = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=cuda):
            torch.set_rng_state(self.states["torch_rng"])
            if cuda:
                torch.cuda.set_rng_state(self.states["cuda_rng"], self.device)
            yield
            self.states = self._current()

    def load(self, state: dict) -> None:
        """The states a checkpoint holds. A key missing (a checkpoint without RNG state, or a CUDA one resumed
        on a CPU and back) keeps the stream where it is: it resumes, just not bit-exactly."""
        self.states.update({k: state[k] for k in self.states if k in state})


# The masks' generator on a GPU starts here past the seed: a stream of its own, apart from the shuffles'.
MASK_SEED_OFFSET = 20_000


def mask_generator(device: torch.device, seed: int, cpu_generator: torch.Generator) -> torch.Generator:
    """Where a pretraining trial draws its masks: on a GPU a generator of its own there (no draw on the host
    and copy per step; a CUDA graph's inputs stay on the device); on a CPU ``cpu_generator``, the loop's
    generator, which also shuffles (the CPU is then the device: nothing to move, and the masks, so every
    CPU result, stay what they were)."""
    if device.type == "cpu":
        return cpu_generator
    return torch.Generator(device=device).manual_seed(seed + MASK_SEED_OFFSET)
