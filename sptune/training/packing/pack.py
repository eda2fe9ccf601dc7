"""A pack: K solo loops of one stage trained as one stacked model (docs/design/training.md, "Packs").

Each member IS a solo loop (`sptune.training.loops`), built exactly as a solo trial builds it: its seeded
initial weights, its data generator (batch order, masks), its dropout stream, its AdamW settings, schedule and
clipping, its validation and its checkpoint (`state_dict`, today's per-trial format). The pack replaces the step
between the draws and the schedule: its network (`stacked.member_template`) runs the members' rows folded into one
batch with their weights as ``[K, ...]`` leaves kept across steps (`pack_params`; each member's weights and AdamW
state are its slices), one backward, and one AdamW step for all. Members share no weight and no row ever mixes
with another's, so each member's loss, gradient and update are its own.

What the members draw comes from their own streams, in the order their solo step draws it: batch indices and
masks by the member's own generators (`rows`, `draws`), dropout noise from its torch RNG stream
(`noise_dropout`). A member whose loss goes NaN/inf is frozen (`diverged`); one stopped from outside (`stop`, e.g.
early stopping) leaves the pack; the others go on, the stack shrunk to them.

Members built with `training.compile: cuda_graphs` on a GPU have their fused step (forward, backward, clipping and
AdamW) captured as one CUDA graph (`step_graph.CapturedStep`), the draws staying outside it as in the solo captured
step: one replay per full batch for the whole pack, captured again when the stack changes.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from functools import partial
from typing import Literal

import torch
from torch import nn

from sptune.training.device import autocast
from sptune.training.epoch_sums import BatchResult, EpochSums
from sptune.training.loops import DIVERGENCE_CHECK_STEPS, EpochLoop, FinetuneLoop, PretrainLoop
from sptune.training.models.attention import SelfAttention
from sptune.training.optimizer import scheduled_lr
from sptune.training.packing.noise_dropout import NoiseFeed, NoiseSpec, draw_noise
from sptune.training.packing.pack_params import PackParameters
from sptune.training.packing.stacked import member_template, unstackable_parameter
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
    unstackable = unstackable_parameter(lead.model)
    if unstackable is not None:
        raise PackError(
            f"model parameter {unstackable} has no stacked form in a pack (it stacks linear, layer-norm and "
            "embedding layers and the encoder's own tables; model.family: ssm has others): use resources.pack: 1"
        )
    if any(isinstance(mod, SelfAttention) and mod.dropout > 0 for mod in lead.model.modules()):
        raise PackError(
            "model.attention_dropout > 0 cannot be packed: the attention kernel draws its dropout inside one "
            "call over every member's rows, from no member's own stream; set it to 0 or resources.pack: 1"
        )


@contextmanager
def _forward_through(loop: EpochLoop, net: nn.Module, members: int) -> Iterator[None]:
    """``loop``'s training forward (`forward_batch`, which reads ``loop.net``) run through the pack's ``net`` on
    ``members`` members' folded rows: the member's own objective code, reduced per member."""
    solo_net, loop.net, loop.folded_members = loop.net, net, members
    try:
        yield
    finally:
        loop.net, loop.folded_members = solo_net, None


class PackLoop:
    """K members (solo loops of one stage) trained together; see the module's docstring.

    members: the loops, already built (and possibly trained or restored) as solo trials."""

    def __init__(self, members: Sequence[EpochLoop]) -> None:
        check_packable(members)
        self.members = list(members)
        self.status: list[Status] = ["training"] * len(members)
        self.errors: list[str | None] = [None] * len(members)
        self.feed = NoiseFeed()
        self.graphed = members[0].graphed  # the members' training.compile: cuda_graphs, on a GPU (check_packable)
        self.stacked: tuple[int, ...] = ()
        self._restack(self.active())

    # ------------------------------------------------------------------ membership

    def active(self) -> list[int]:
        return [k for k, s in enumerate(self.status) if s == "training"]

    def stop(self, k: int) -> None:
        """Member ``k`` leaves the pack (early stopping): it costs no compute from the next step on."""
        if self.status[k] == "training":
            self.status[k] = "stopped"

    def _restack(self, active: list[int]) -> None:
        """The network and stacked parameters of the ``active`` members, from their current state; the graph
        captured for another stack (and its memory) goes."""
        members = [self.members[k] for k in active]
        lead = members[0]
        self.template = member_template(lead.model, len(members), self.feed).to(lead.device)
        self.params = PackParameters(members, self.template)
        self.stacked = tuple(active)
        self._specs: dict[tuple, list[NoiseSpec]] = {}
        self._captured: CapturedStep | None = None

    def new_sums(self) -> EpochSums:
        """Running sums for the members stacked now (``[K]`` each)."""
        return EpochSums(self.members[self.stacked[0]].device, len(self.stacked))

    # ------------------------------------------------------------------ one step

    def _noise_specs(self, inputs: tuple[torch.Tensor, ...]) -> list[NoiseSpec]:
        """The dropout calls one member's forward makes on inputs of these shapes (recorded once per shape)."""
        key = tuple(tuple(t.shape) for t in inputs)
        if key not in self._specs:
            lead, k = self.members[self.stacked[0]], len(self.stacked)
            self.feed.recording, self.feed.specs = True, []
            try:
                with torch.no_grad(), autocast(lead.device, lead.cfg.precision), \
                        _forward_through(lead, self.template, k):
                    lead.forward_batch(*inputs)
            finally:
                self.feed.recording = False
            self._specs[key] = [dataclasses.replace(s, shape=(s.shape[0] // k, *s.shape[1:])) for s in self.feed.specs]
        return self._specs[key]

    def draw_inputs(self, members: list[EpochLoop]) -> tuple[torch.Tensor, ...]:
        """The members' batches folded into one, member-major: each member's indices from its own order, the
        rows gathered at once, then what each member's generators draw for its rows (pretraining's masks)."""
        idx = torch.cat([m.batches.next() for m in members])
        rows = members[0].rows(idx)
        draws = [m.draws(x) for m, x in zip(members, rows[0].chunk(len(members)), strict=True)]
        return rows + tuple(torch.cat(parts) for parts in zip(*draws, strict=True))

    def train_step(self, active: list[int], sums: EpochSums) -> None:
        """One optimizer step of every active member (the stacked ones: `new_sums`' order): each draws its batch
        (and mask) as its solo step does and its dropout noise under its own stream, one fused step serves all
        (`fused_step`, replayed as a CUDA graph where the members capture and the batch is full), then each
        member's schedule advances and the step joins ``sums``."""
        members = [self.members[k] for k in active]
        inputs = self.draw_inputs(members)
        specs = self._noise_specs(inputs)
        noise = []
        for m in members if specs else ():
            with m.rng.own():
                noise.append(draw_noise(specs, m.device))
        tensors = [*inputs, *(torch.cat(parts) for parts in zip(*noise, strict=True))]
        lrs = [scheduled_lr(m.schedule) for m in members]  # the rate each member's solo step would take
        self.params.lr.copy_(torch.tensor(lrs, dtype=torch.float64), non_blocking=True)
        examples = len(inputs[0]) // len(members)
        step = partial(self.fused_step, len(inputs))
        if self.graphed and examples == members[0].cfg.batch_size:
            if self._captured is None:
                self._captured = CapturedStep(step)
            step = self._captured
        loss, hits, scored, norms = step(tensors)
        for m in members:
            m.count_step(examples)
        sums.add(BatchResult(loss, hits, scored), norms, examples)

    def fused_step(self, n_inputs: int, tensors: Sequence[torch.Tensor]) -> tuple:
        """The step between the draws and the schedule, on the folded inputs (the first ``n_inputs`` tensors) and
        noise (the rest): one forward through the lead member's own `forward_batch` on the pack's network, one
        backward for all, one clipping and AdamW step for all (`PackParameters.step`). Returns the members'
        losses, hits, scored counts and pre-clip norms (``[K]``)."""
        loss, hits, scored = self.forward_backward(n_inputs, tensors)
        return loss, hits, scored, self.params.step()

    def forward_backward(self, n_inputs: int, tensors: Sequence[torch.Tensor]) -> BatchResult:
        """`fused_step`'s forward and backward alone: the members' results, their gradients on the stacked
        leaves (`PackParameters.leaves`, member k's at ``[k]``)."""
        lead, k = self.members[self.stacked[0]], len(self.stacked)
        self.feed.queue = list(tensors[n_inputs:])
        with autocast(lead.device, lead.cfg.precision, cache=not self.graphed), \
                _forward_through(lead, self.template, k):
            batch = lead.forward_batch(*tensors[:n_inputs])
        self.params.zero_grad()
        batch.loss.sum().backward()
        return batch

    # ------------------------------------------------------------------ rounds

    def _freeze_diverged(self, active: list[int], sums: EpochSums) -> None:
        finite = torch.isfinite(sums.loss).tolist()  # one sync for all
        for k, ok, loss in zip(active, finite, sums.split(), strict=True):
            if not ok:
                self.status[k] = "diverged"
                self.errors[k] = f"loss became {float(loss.loss)} at epoch {self.members[k].epoch + 1}"

    def train_steps(self, n_steps: int) -> dict[int, dict]:
        """`n_steps` steps of every active member, then each one's validation: member index -> the metrics its
        solo loop's `train_steps` reports, or ``{"diverged": 1, "error": ...}`` for one that diverged now."""
        start_active = active = self.active()
        if tuple(active) != self.stacked or not self.params.aliased():
            self._restack(active)
        for k in active:
            self.members[k].model.train()
        self.template.train()
        totals: dict[int, EpochSums] = {}
        sums = self.new_sums()
        start = time.perf_counter()
        for step in range(1, n_steps + 1):
            self.train_step(active, sums)
            if step % DIVERGENCE_CHECK_STEPS == 0:
                self._freeze_diverged(active, sums)
                if self.active() != active:  # the stack shrinks to the members still training
                    totals.update(zip(active, sums.split(), strict=True))
                    active = self.active()
                    if not active:
                        break
                    self._restack(active)
                    self.template.train()
                    sums = _continued(sums, active, totals)
        if active:
            self._freeze_diverged(active, sums)
            totals.update(zip(active, sums.split(), strict=True))
        seconds = time.perf_counter() - start  # the pack's wall time: every member trained during all of it
        return {k: self._round_result(k, totals[k], n_steps, seconds) for k in start_active}

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


def _continued(sums: EpochSums, active: list[int], totals: dict[int, EpochSums]) -> EpochSums:
    """Sums for the shrunk stack ``active`` that go on from each member's ``totals`` so far."""
    out = EpochSums(sums.loss.device, len(active))
    for name in ("loss", "grad_norm", "hits", "scored"):
        setattr(out, name, torch.stack([getattr(totals[k], name) for k in active]).clone())
    out.examples, out.steps = sums.examples, sums.steps
    return out


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
