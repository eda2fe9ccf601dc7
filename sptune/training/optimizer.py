"""The training loops' optimizer pieces: AdamW's parameter groups (which weights decay) and the LR schedule."""

from __future__ import annotations

import math

import torch
from torch import nn

from sptune.training.models.encoder import INPUT_EMBEDDING


def lr_schedule(
    optimizer: torch.optim.Optimizer, total_steps: int, warmup_steps: int, shape: str = "cosine"
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up over ``warmup_steps`` (at least 1), then ``shape``: cosine decay to 0 at ``total_steps``,
    or constant at the peak (the reference's constant_warmup)."""
    if shape not in ("cosine", "constant"):
        raise ValueError(f"unknown LR schedule {shape!r}: use cosine or constant")
    warmup = max(1, warmup_steps)

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        if shape == "constant":
            return 1.0
        progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
        return 0.5 * (1 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def _decays(module: nn.Module, name: str, param: nn.Parameter) -> bool:
    """Whether weight decay applies: only to the weight matrices of layers that mix features.

    Decay is a prior that pulls a linear map toward zero. A matrix `weight` (nn.Linear inside
    attention, feed-forward and heads; GPT-2's Conv1D) is such a map. Everything else has a
    meaningful non-zero value that decay would only distort: biases and norm scales/shifts (1-D),
    token and value embeddings (their rows are the input representations themselves; decay
    shrinks rarely seen tokens most), and parameters a module owns directly under their own
    names (learned positions, the cls token, the SSM's step sizes, A, C and D).
    """
    if name != "weight" or param.ndim < 2:
        return False
    return not isinstance(module, nn.Embedding) and not getattr(module, INPUT_EMBEDDING, False)


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """AdamW groups: [decayed weight matrices, everything else with weight_decay 0].

    Frozen parameters are left out; a parameter shared by several modules appears once.
    Both groups always exist (possibly empty) so every optimizer state has the same layout.
    """
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    seen: set[int] = set()
    for module in model.modules():
        for name, param in module.named_parameters(recurse=False):
            if param.requires_grad and id(param) not in seen:
                seen.add(id(param))
                (decay if _decays(module, name, param) else no_decay).append(param)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def global_grad_norm(params: list[nn.Parameter]) -> torch.Tensor:
    """The L2 norm of all gradients together, on the device: clip_grad_norm_'s own computation (one
    `_foreach_norm` launch per device and dtype, not one norm per parameter), without the clipping."""
    grads = [p.grad for p in params if p.grad is not None]
    return nn.utils.get_total_norm(grads, foreach=None) if grads else torch.zeros(())


def place_lr(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """Each group's learning rate where AdamW reads it: on a GPU a 0-d fp32 tensor there (the schedule fills
    it in place, so neither a step nor a captured CUDA graph bakes in a host number); on a CPU, the CPU being
    the device, the plain float it always was. Call after building the schedule (its base rates stay floats)
    and after loading a checkpoint (whose rates are floats)."""
    for group in optimizer.param_groups:
        lr = group["lr"]
        if device.type == "cuda":
            value = lr.to(device, torch.float32) if isinstance(lr, torch.Tensor) else torch.tensor(lr, device=device)
            group["lr"] = value.clone()  # one tensor per group: the schedule fills each
        elif isinstance(lr, torch.Tensor):
            group["lr"] = float(lr)


def scheduled_lr(schedule: torch.optim.lr_scheduler.LambdaLR) -> float:
    """The rate the next optimizer step uses, computed on the host as LambdaLR computes it (reading the
    optimizer's device tensor would wait for the GPU)."""
    return schedule.base_lrs[0] * schedule.lr_lambdas[0](schedule.last_epoch)


def _plain(value: object) -> object:
    return float(value) if isinstance(value, torch.Tensor) and value.numel() == 1 else value


def plain_lr_state(state: dict) -> dict:
    """An optimizer state dict with its groups' rates as floats (a checkpoint's format on any device)."""
    groups = [{k: (_plain(v) if k in ("lr", "initial_lr") else v) for k, v in g.items()} for g in state["param_groups"]]
    return {**state, "param_groups": groups}


def plain_schedule_state(state: dict) -> dict:
    """A schedule state dict with its last rates as floats (LambdaLR keeps tensor copies of tensor rates)."""
    return {**state, "_last_lr": [_plain(v) for v in state.get("_last_lr", [])]}
