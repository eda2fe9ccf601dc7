"""A pack: K solo loops of one stage trained as one fused model (docs/design/training.md, "Packs").

Each member IS a solo loop (`sptune.training.loops`), built exactly as a solo trial builds it: its seeded
initial weights, its data generator (batch order, masks), its dropout stream, its AdamW, schedule and clipping,
its validation and its checkpoint (`state_dict`, today's per-trial format). The pack only replaces the forward
and backward: every step it stacks the members' weights along a leading member dimension and runs one
`torch.func.vmap` of `functional_call` over them, so K small models cost one set of batched kernels. The stack
is differentiable, so one backward leaves each member's gradients on its own parameters, where its own
clipping and optimizer step run unchanged.

What the members draw comes from their own streams, outside vmap, in the order their solo step draws it:
batch indices and masks by the member's own `batch_inputs` (its generator; its `mask_generator`, on a GPU a
generator of its own there), dropout noise from its torch RNG stream (`noise_dropout`). A member whose loss goes
NaN/inf is frozen (`diverged`); one stopped from outside (`stop`, e.g. early stopping) leaves the pack; the others
go on.

Members built with `training.compile: cuda_graphs` on a GPU have their fused step (stack, forward, backward, each
member's clipping and AdamW) captured as one CUDA graph (`step_graph.CapturedStep`), the draws staying outside it
as in the solo captured step: one replay per full batch for the whole pack.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Literal

import torch
from torch.func import functional_call, vmap

from sptune.training.device import autocast
from sptune.training.epoch_sums import BatchResult, EpochSums
from sptune.training.loops import DIVERGENCE_CHECK_STEPS, EpochLoop, FinetuneLoop, PretrainLoop
from sptune.training.models.attention import SelfAttention
from sptune.training.packing.noise_dropout import NoiseFeed, draw_noise, fed_template
from sptune.training.step_graph import CapturedStep

Status = Literal["training", "diverged", "stopped"]

# Members with `training.compile: cuda_graphs` on a GPU train with the fused step captured (`PackLoop.graphed`):
# what a timing script asks before it times a captured pack (one without this would time an eager one).
CAPTURES_WHOLE_STEP = True


class PackError(ValueError):
    """The loops given cannot train as one pack (the message says which field differs)."""


def check_packable(members: Sequence[EpochLoop]) -> None:
    """Refuse loops that are not one stage's trials differing only in lr, weight decay, warm-up and seed."""
    if not members:
        raise PackError("a pack needs at least one member")
    lead = members[0]
    if type(lead) not in (FinetuneLoop, PretrainLoop):
        raise PackError(f"a pack trains FinetuneLoop or PretrainLoop members, not {type(lead).__name__}")
    same = {
        "loop type": lambda m: type(m),
        "batch_size": lambda m: m.cfg.batch_size,
        "budget (epochs/steps)": lambda m: (m.cfg.epochs, m.cfg.steps, m.cfg.eval_every),
        "device": lambda m: m.device,
        "precision": lambda m: m.cfg.precision,
        "whole-step capture (training.compile)": lambda m: m.graphed,
        "grad_clip": lambda m: m.cfg.grad_clip > 0,
        "training rows": lambda m: tuple(m.train_x.shape),
        "task": lambda m: m.info,
        "objective": lambda m: getattr(m, "objective", None),
        "optimizer steps so far": lambda m: m.optimizer_steps,
        "parameters": lambda m: [(n, tuple(p.shape), p.requires_grad) for n, p in m.model.named_parameters()],
        # The template (the lead's model) runs every member's forward, with the lead's dropout rates: settings
        # no parameter shows (dropout, pooling, attention kernel, ...) must match too.
        "architecture": lambda m: (repr(m.model), [getattr(mod, "cfg", None) for mod in m.model.modules()]),
    }
    for what, key in same.items():
        if any(key(m) != key(lead) for m in members[1:]):
            raise PackError(
                f"pack members differ in {what}: a pack holds one stage's trials, which differ only "
                "in lr, weight decay, warm-up and seed; train the others in another pack or alone"
            )
    # The same rows, not just as many: members index one split (a shared copy is the same tensor, checked first).
    if any(
        m.train_x.data_ptr() != lead.train_x.data_ptr() and not torch.equal(m.train_x, lead.train_x)
        for m in members[1:]
    ):
        raise PackError("pack members train on different data: a pack holds trials of one stage on one training split")
    if any(isinstance(mod, SelfAttention) and mod.dropout > 0 for mod in lead.model.modules()):
        raise PackError(
            "model.attention_dropout > 0 cannot be packed: the attention kernel draws its dropout "
            "inside the fused call, from no member's own stream; set it to 0 or resources.pack: 1"
        )


@contextmanager
def _forward_through(loop: EpochLoop, net: Callable[..., torch.Tensor]) -> Iterator[None]:
    """``loop``'s training forward (`forward_batch`, which reads ``loop.net``) run through ``net`` instead: the
    member's own objective code on the pack's functional network."""
    solo_net, loop.net = loop.net, net
    try:
        yield
    finally:
        loop.net = solo_net


class PackLoop:
    """K members (solo loops of one stage) trained together; see the module's docstring."""

    def __init__(self, members: Sequence[EpochLoop]) -> None:
        check_packable(members)
        self.members = list(members)
        self.status: list[Status] = ["training"] * len(members)
        self.errors: list[str | None] = [None] * len(members)
        lead = self.members[0]
        self.feed = NoiseFeed()
        self.template = fed_template(lead.model, self.feed).to(lead.device)
        self.graphed = lead.graphed  # the members' training.compile: cuda_graphs, on a GPU (check_packable)
        self.buffers = dict(self.template.named_buffers())
        self.names = [name for name, _ in lead.model.named_parameters()]
        # Each member's parameters in `names` order, looked up once: the stack is rebuilt from them every step.
        self.params = [[m.model.get_parameter(name) for name in self.names] for m in self.members]
        self._specs: dict[tuple, list] = {}
        self._vmapped = vmap(self._member_batch, randomness="error")
        # The captured fused step and the active members and input count it was captured for: a graph replays
        # the members it recorded, so a member leaving means a new capture (after its warm-up steps).
        self._captured: tuple[tuple, CapturedStep] | None = None

    # ------------------------------------------------------------------ membership

    def active(self) -> list[int]:
        return [k for k, s in enumerate(self.status) if s == "training"]

    def stop(self, k: int) -> None:
        """Member ``k`` leaves the pack (early stopping): it costs no compute from the next step on."""
        if self.status[k] == "training":
            self.status[k] = "stopped"

    # ------------------------------------------------------------------ one step

    def _net(self, params: dict[str, torch.Tensor]) -> Callable[..., torch.Tensor]:
        return lambda *args, **kwargs: functional_call(self.template, (params, self.buffers), args, kwargs)

    def _batch_loss(self, params: dict, inputs: tuple[torch.Tensor, ...]) -> BatchResult:
        """One member's training forward on its `batch_inputs`, through the lead member's own `forward_batch`
        with the template (holding ``params``) as its network."""
        lead = self.members[0]
        with _forward_through(lead, self._net(params)):
            return lead.forward_batch(*inputs)

    def _member_batch(
        self, params: dict, inputs: tuple[torch.Tensor, ...], noise: list[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        self.feed.queue = list(noise)
        loss, hits, scored = self._batch_loss(params, inputs)
        if not isinstance(scored, torch.Tensor):  # vmap returns tensors only; `full` is a kernel a graph can hold
            scored = torch.full((), scored, device=inputs[0].device)
        return loss, hits, scored

    def _noise_specs(self, params: dict, inputs: tuple[torch.Tensor, ...]) -> list:
        """The dropout calls one member's forward makes on inputs of these shapes (recorded once per shape)."""
        key = tuple(tuple(t.shape) for t in inputs)
        if key not in self._specs:
            self.feed.recording, self.feed.specs = True, []
            try:
                with torch.no_grad(), autocast(inputs[0].device, self.members[0].cfg.precision):
                    self._batch_loss(params, inputs)
            finally:
                self.feed.recording = False
            self._specs[key] = self.feed.specs
        return self._specs[key]

    def train_step(self, active: list[int], sums: dict[int, EpochSums]) -> None:
        """One optimizer step of every active member: each draws its batch (and mask) as its solo step does
        (`batch_inputs`: the same generators) and its dropout noise under its own stream, one fused step serves
        all (`fused_step`, replayed as a CUDA graph where the members capture and the batch is full), then each
        runs its solo step's end (`end_step`: schedule and sums)."""
        members = [self.members[k] for k in active]
        drawn = [m.batch_inputs(m.batches.next()) for m in members]
        specs = self._noise_specs(dict(zip(self.names, (p.detach() for p in self.params[active[0]]), strict=True)),
                                  drawn[0])
        noise = []
        for m in members:
            with m.rng.own():
                noise.append(draw_noise(specs, m.device))
        tensors = [torch.stack(parts) for parts in zip(*drawn, strict=True)]
        tensors += [torch.stack(parts) for parts in zip(*noise, strict=True)]
        examples = len(drawn[0][0])
        step = partial(self.fused_step, tuple(active), len(drawn[0]))
        if self.graphed and examples == members[0].cfg.batch_size:
            step = self._captured_step(tuple(active), len(drawn[0]), step)
        loss, hits, scored, norms = step(tensors)
        for j, (k, m) in enumerate(zip(active, members, strict=True)):
            m.end_step(sums[k], BatchResult(loss[j], hits[j], scored[j]), norms[j], examples)

    def fused_step(self, active: tuple[int, ...], n_inputs: int, tensors: Sequence[torch.Tensor]) -> tuple:
        """The step between the draws and `end_step`, on the members' stacked inputs (the first ``n_inputs``
        tensors) and noise (the rest): one vmapped forward and one backward for all (members share no weights,
        so each gets the gradient of its own loss alone), then each member's own clipping and AdamW
        (`apply_gradients`). Returns the members' losses, hits and scored counts (``[K]``) and pre-clip norms."""
        members = [self.members[k] for k in active]
        params = {n: torch.stack([self.params[k][i] for k in active]) for i, n in enumerate(self.names)}
        inputs, noise = tuple(tensors[:n_inputs]), list(tensors[n_inputs:])
        with autocast(members[0].device, members[0].cfg.precision, cache=not self.graphed):
            loss, hits, scored = self._vmapped(params, inputs, noise)
        for m in members:
            m.zero_grad()
        loss.sum().backward()
        return loss, hits, scored, [m.apply_gradients() for m in members]

    def _captured_step(self, active: tuple[int, ...], n_inputs: int, step: Callable) -> CapturedStep:
        key = (active, n_inputs)
        if self._captured is None or self._captured[0] != key:
            self._captured = (key, CapturedStep(step))  # the old graph (and its memory) goes with the old entry
        return self._captured[1]

    # ------------------------------------------------------------------ rounds

    def _freeze_diverged(self, active: list[int], sums: dict[int, EpochSums]) -> None:
        finite = torch.isfinite(torch.stack([sums[k].loss for k in active])).tolist()  # one sync for all
        for k, ok in zip(active, finite, strict=True):
            if not ok:
                self.status[k] = "diverged"
                self.errors[k] = f"loss became {float(sums[k].loss)} at epoch {self.members[k].epoch + 1}"

    def train_steps(self, n_steps: int) -> dict[int, dict]:
        """`n_steps` steps of every active member, then each one's validation: member index -> the metrics its
        solo loop's `train_steps` reports, or ``{"diverged": 1, "error": ...}`` for one that diverged now."""
        start_active = self.active()
        for k in start_active:
            self.members[k].model.train()
        sums = {k: EpochSums(self.members[k].device) for k in start_active}
        start = time.perf_counter()
        active = start_active
        for step in range(1, n_steps + 1):
            self.train_step(active, sums)
            if step % DIVERGENCE_CHECK_STEPS == 0:
                self._freeze_diverged(active, sums)
                active = self.active()
                if not active:
                    break
        if active:
            self._freeze_diverged(active, sums)
        seconds = time.perf_counter() - start  # the pack's wall time: every member trained during all of it
        return {k: self._round_result(k, sums[k], n_steps, seconds) for k in start_active}

    def _round_result(self, k: int, sums: EpochSums, n_steps: int, seconds: float) -> dict:
        if self.status[k] == "diverged":
            return {"diverged": 1, "error": self.errors[k]}
        return self.members[k].end_round(sums, n_steps, seconds)

    def train_round(self) -> dict[int, dict]:
        """One Tune iteration of every active member (`EpochLoop.train_round`: an epoch, or `eval_every` steps)."""
        lead = self.members[self.active()[0]]
        if lead.cfg.steps is None:
            return self.train_steps(lead.steps_per_epoch)
        left = lead.cfg.steps - lead.optimizer_steps
        return self.train_steps(max(1, min(lead.cfg.eval_every, left)))


def train_pack_steps(members: Sequence[EpochLoop], n_steps: int) -> list[dict]:
    """The benchmarks' entry point: train already-built solo loops as one pack for ``n_steps`` steps.

    Returns one dict per member, in order: its status (training | diverged), and (unless it diverged) the round's
    train loss, mean pre-clip gradient norm and validation metrics. Timing is the caller's to take."""
    pack = PackLoop(members)
    results = pack.train_steps(n_steps)
    return [
        {"status": pack.status[k], **{key: v for key, v in results[k].items() if key != "epoch_seconds"}}
        for k in range(len(members))
    ]
