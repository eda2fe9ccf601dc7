"""A pack's parameters and AdamW: the members' weights as ``[K, ...]`` leaves in one flat buffer, one step for all.

Every trainable parameter of the pack's network (`stacked.member_template`) is a ``[K, *shape]`` view of one flat
buffer, laid out parameter by parameter (decayed weight matrices first), member-major within each; AdamW's moments
are flat buffers of the same layout. Each member's own parameters and optimizer state become *its slices* of these
(``param.data``, ``optimizer.state``): its state dict, checkpoint and `load_state_dict` read and write the pack's
memory, and a member leaving the pack (or training alone) carries on from exactly where the pack left it.

One optimizer step serves the pack: the flat gradient, each member's norm from one scatter-add, each member's
clipping, and AdamW's update as a handful of elementwise ops over the whole buffer, each member's lr, weight decay,
betas and eps broadcast to its elements (`owner`), so the op count does not grow with K. The update is
`torch.optim.AdamW`'s (decoupled decay, bias-corrected moments; what its fused kernel computes), the pre-clip norm
and the clipping `clip_grad_norm_`'s. Everything stays on the device: the lrs are a device tensor the pack fills
before each step, so a CUDA graph can hold the step.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from sptune.training.loops import EpochLoop

CLIP_EPS = 1e-6  # clip_grad_norm_'s: max_norm / (norm + 1e-6)


class PackParameters:
    """The stacked parameters of ``members`` installed in ``template``, and their AdamW (module docstring).

    members: the pack's loops (one stage, checked by `check_packable`); template: their network for
    ``len(members)`` members, whose parameters (the lead member's names) are replaced here by the stacked ones."""

    def __init__(self, members: Sequence[EpochLoop], template: nn.Module) -> None:
        lead, k = members[0], len(members)
        self.members, self.k = list(members), k
        self.device = lead.device
        groups = [g["params"] for g in lead.optimizer.param_groups]  # [decayed, not decayed] (parameter_groups)
        names = {id(p): n for n, p in lead.model.named_parameters()}
        self.names = [names[id(p)] for group in groups for p in group]
        self.clip = lead.cfg.grad_clip
        dtypes = {p.dtype for group in groups for p in group}
        if len(dtypes) != 1:
            raise ValueError(f"a pack's trainable parameters share one dtype, not {sorted(map(str, dtypes))}")
        sizes = [p.numel() * k for group in groups for p in group]
        self.n_decayed = sum(sizes[: len(groups[0])])
        total = sum(sizes)
        self.flat = torch.empty(total, dtype=dtypes.pop(), device=self.device)
        self.exp_avg, self.exp_avg_sq = torch.zeros_like(self.flat), torch.zeros_like(self.flat)
        self.steps = torch.zeros(k, len(self.names), dtype=torch.float32, device=self.device)
        # Which member each element belongs to: the hyperparameters' broadcast.
        self.owner = torch.cat([torch.arange(k, device=self.device).repeat_interleave(n // k) for n in sizes])
        self.leaves: list[nn.Parameter] = []
        offset = 0
        for i, (name, size) in enumerate(zip(self.names, sizes, strict=True)):
            shape = lead.model.get_parameter(name).shape
            views = [buf[offset : offset + size].view(k, *shape) for buf in (self.flat, self.exp_avg, self.exp_avg_sq)]
            self._adopt(i, name, views)
            self.leaves.append(_install(template, name, nn.Parameter(views[0])))
            offset += size
        self._freeze_rest(template)
        self._hyperparameters()

    def _adopt(self, i: int, name: str, views: list[torch.Tensor]) -> None:
        """Member k's parameter ``name`` and its AdamW state, copied into slice k, then made that slice."""
        for j, m in enumerate(self.members):
            param = m.model.get_parameter(name)
            state = m.optimizer.state.get(param, {})
            with torch.no_grad():
                views[0][j].copy_(param)
                for view, key in zip(views[1:], ("exp_avg", "exp_avg_sq"), strict=True):
                    if key in state:
                        view[j].copy_(state[key])
                if "step" in state:
                    self.steps[j, i] = float(state["step"])
            param.data = views[0][j]
            # Its steps are the pack's: its schedule must not warn that it steps before the optimizer ever did.
            m.optimizer._opt_called = True
            m.optimizer.state[param] = {"step": self.steps[j, i], "exp_avg": views[1][j], "exp_avg_sq": views[2][j]}

    def _freeze_rest(self, template: nn.Module) -> None:
        """Frozen parameters (a variant's frozen attention) stacked once, never updated."""
        trained = set(self.names)
        for name, _ in list(template.named_parameters()):
            if name not in trained:
                stacked = torch.stack([m.model.get_parameter(name).detach() for m in self.members])
                _install(template, name, nn.Parameter(stacked, requires_grad=False))

    def _hyperparameters(self) -> None:
        cfgs = [m.cfg for m in self.members]
        per_member = lambda values: torch.tensor(values, dtype=torch.float64, device=self.device)  # noqa: E731
        self.beta1 = per_member([c.betas[0] for c in cfgs])
        self.beta2 = per_member([c.betas[1] for c in cfgs])
        self.weight_decay = per_member([m.optimizer.param_groups[0]["weight_decay"] for m in self.members])
        spread = lambda values: values.to(self.flat.dtype)[self.owner]  # noqa: E731
        self.one_minus_beta1, self.beta2_e = spread(1 - self.beta1), spread(self.beta2)
        self.one_minus_beta2 = spread(1 - self.beta2)
        self.eps = spread(per_member([c.eps for c in cfgs]))
        self.lr = torch.zeros(self.k, dtype=torch.float64, device=self.device)  # filled before every step

    def aliased(self) -> bool:
        """Whether every member's parameters are still its slices here (a newer pack of one of them re-slices)."""
        return all(
            m.model.get_parameter(self.names[0]).data_ptr() == self.leaves[0][j].data_ptr()
            for j, m in enumerate(self.members)
        )

    def zero_grad(self) -> None:
        """Gradients dropped, not zeroed: the backward writes fresh ones (a captured step writes them in its
        memory), which `step` gathers into one flat tensor."""
        for leaf in self.leaves:
            leaf.grad = None

    @torch.no_grad()
    def step(self) -> torch.Tensor:
        """Clipping and AdamW for every member at once; each member's pre-clip gradient norm (``[K]``)."""
        missing = [n for n, leaf in zip(self.names, self.leaves, strict=True) if leaf.grad is None]
        if missing:
            raise RuntimeError(f"pack parameters {missing} got no gradient: a pack trains parameters that all do")
        grads = torch.cat([leaf.grad.reshape(-1) for leaf in self.leaves])
        norms = torch.zeros(self.k, dtype=grads.dtype, device=self.device).index_add_(0, self.owner, grads * grads)
        norms = norms.sqrt_()
        if self.clip > 0:
            grads.mul_((self.clip / (norms + CLIP_EPS)).clamp_(max=1.0)[self.owner])
        self.steps.add_(1)
        step = self.steps[:, 0].double()
        bias1, bias2 = 1 - self.beta1**step, 1 - self.beta2**step
        spread = lambda values: values.to(self.flat.dtype)[self.owner]  # noqa: E731
        decayed = self.flat[: self.n_decayed]
        decayed.mul_((1 - self.lr * self.weight_decay).to(self.flat.dtype)[self.owner[: self.n_decayed]])
        self.exp_avg.lerp_(grads, self.one_minus_beta1)
        self.exp_avg_sq.mul_(self.beta2_e).addcmul_(grads, grads * self.one_minus_beta2)
        denom = (self.exp_avg_sq.sqrt() / spread(bias2.sqrt())).add_(self.eps)
        self.flat.addcdiv_(self.exp_avg * spread(-self.lr / bias1), denom)
        return norms


def _install(model: nn.Module, name: str, param: nn.Parameter) -> nn.Parameter:
    owner, _, leaf = name.rpartition(".")
    setattr(model.get_submodule(owner) if owner else model, leaf, param)
    return param
