"""A trial's optimiser and schedule settings, as the training loops take them (sptune.training.loops)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class OptimConfig:
    lr: float
    batch_size: int
    epochs: int  # the schedule's horizon, even if the scheduler stops the trial earlier (with steps: the rounds)
    weight_decay: float = 0.0
    warmup_fraction: float = 0.1
    warmup_steps: int | None = None  # when given, the warm-up in optimizer steps (else warmup_fraction of the budget)
    schedule: str = "cosine"  # after the warm-up: cosine decay to 0 at the horizon, or constant
    grad_clip: float = 1.0
    seed: int = 0
    device: str = "auto"
    precision: str = "auto"
    compile: bool | str = False  # training.compile (sptune.training.device.compiled)
    deterministic: bool = False  # PyTorch's deterministic algorithms (sptune.training.device.set_determinism)
    betas: tuple[float, float] = (0.9, 0.999)  # AdamW's moment decay rates
    eps: float = 1e-8  # AdamW's denominator guard
    # A budget in optimizer steps (sptune.rules.budgets): the schedule's horizon, trained `eval_every` steps per
    # `train_round` (the last round what is left). None: the budget is `epochs`, one epoch per round.
    steps: int | None = None
    eval_every: int | None = None
