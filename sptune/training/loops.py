"""Pure-PyTorch epoch loops for the two stages (no Ray here).

Each loop owns its model, optimizer, schedule and RNGs, trains one epoch per call, evaluates on the validation
split, and round-trips its full state through a plain dict of tensors and numbers (``weights_only`` loadable).

Randomness in training, all in that state: the loop's generator (shuffles; on a CPU also the pretraining masks),
on a GPU the masks' own generator there (`mask_generator`), and the torch RNG dropout draws from (CPU, and CUDA
when training there), kept as the loop's own stream (`TorchRngStream`). NumPy and `random` are not used.

One step is `batch_inputs` (the rows, and everything random about them but dropout) then `train_step_on`
(forward, backward, clipping, AdamW), which `training.compile: cuda_graphs` captures (`step_graph`).
"""

from __future__ import annotations

import math
import time

import torch
import torch.nn.functional as F
from torch import nn

from sptune.tasks.arrays import unpaired
from sptune.tasks.base import ArraySplit, TaskInfo
from sptune.training import objectives as obj
from sptune.training import optimizer as opt
from sptune.training.batch_order import BatchOrder
from sptune.training.device import autocast, compiled, pick_device, precision_in_use, set_determinism, set_fp32_matmul
from sptune.training.device_data import on_device
from sptune.training.epoch_sums import BatchResult, EpochSums
from sptune.training.models import Classifier, ModelConfig, Pretrainer
from sptune.training.models.encoder import EncoderConfig
from sptune.training.objectives import PretrainObjective
from sptune.training.optim_config import OptimConfig
from sptune.training.rng_stream import TorchRngStream, mask_generator
from sptune.training.scoring import EVAL_BATCH, score
from sptune.training.step_graph import CapturedStep
from sptune.training.trivial_scores import TrivialScores, most_frequent_token

# Steps between divergence checks (each costs a device sync on GPUs); a diverged trial loses at
# most this many steps of compute before it stops.
DIVERGENCE_CHECK_STEPS = 32


class Diverged(RuntimeError):
    """The training loss became NaN or infinite."""


class EpochLoop:
    """Shared machinery: data on the device, shuffling, optimizer, schedule, RNGs, state. `model`: the network
    (moved to the device); `info`: the task's inputs and labels; `train`, `val`: the splits, copied to the device
    once (train shuffled each epoch, val evaluated after each); `cfg`: the trial's optimiser, budget, device,
    precision, compilation, determinism and seed."""

    # The name of the training accuracy this loop reports each epoch: the running mean over the epoch's
    # minibatches (dropout on, weights moving), not the checkpoint's accuracy on the training split, which the
    # final evaluation measures as `train_acc` (sptune.study.final_evaluation).
    train_accuracy_key = "train_acc_running"

    def __init__(self, model: nn.Module, info: TaskInfo, train: ArraySplit, val: ArraySplit, cfg: OptimConfig) -> None:
        self.cfg = cfg
        self.info = info
        self.device = pick_device(cfg.device)
        set_determinism(cfg.deterministic, self.device)  # before the model reaches the device (cuBLAS's workspace)
        set_fp32_matmul(self.device)
        torch.manual_seed(cfg.seed)
        self.rng = TorchRngStream(self.device)  # dropout's stream starts at the seed
        self.model = model.to(self.device)
        # Training's forward passes go through `net`; `model` keeps clean state-dict keys for checkpoints and
        # runs validation (eval mode would be another graph to compile).
        self.net = compiled(self.model, cfg.compile, self.device)
        # Whole splits live on the device: no per-batch host copies or loader workers.
        self.train_x, self.train_y = self._to_device(train)
        self.val_x, self.val_y = self._to_device(val)
        # Decided once here: asking per batch would read the answer back from a GPU every step.
        self.padded = obj.has_padding(info, self.train_x, self.val_x)
        self.generator = torch.Generator(device="cpu").manual_seed(cfg.seed)  # shuffles (and pretraining's masks)
        self.batches = BatchOrder(len(train), cfg.batch_size, self.generator, self.device)
        groups = opt.parameter_groups(self.model, cfg.weight_decay)
        self.trainable = [p for group in groups for p in group["params"]]
        # AdamW's fused kernel on CPU too: one pass per parameter rather than ~10 tensor ops, the same
        # update up to float rounding (docs/design/training.md). Capturable where its step is captured.
        fused = self.device.type in ("cuda", "cpu")
        self.graphed = cfg.compile == "cuda_graphs" and self.device.type == "cuda"
        self.optimizer = torch.optim.AdamW(groups, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, fused=fused,
                                           capturable=self.graphed)
        self.steps_per_epoch = math.ceil(len(train) / cfg.batch_size)
        total_steps = cfg.steps if cfg.steps is not None else self.steps_per_epoch * cfg.epochs
        warmup = cfg.warmup_steps if cfg.warmup_steps is not None else int(total_steps * cfg.warmup_fraction)
        self.schedule = opt.lr_schedule(self.optimizer, total_steps, warmup, cfg.schedule)
        opt.place_lr(self.optimizer, self.device)  # on a GPU a tensor there: the schedule never waits on the host
        self.last_lr = opt.scheduled_lr(self.schedule)
        # The whole step as one CUDA graph (training.compile: cuda_graphs on a GPU), else None: eager.
        self.captured = CapturedStep(self.train_step_on) if self.graphed else None
        self.epoch = 0  # rounds trained: epochs, or evaluation rounds of a steps budget
        self.tokens_seen = 0
        # A paired task's example is two sequences (retrieval: two documents), each seq_len long.
        self.tokens_per_example = self.info.seq_len * (train.x.shape[1] if train.x.ndim == 3 else 1)
        self.optimizer_steps = 0
        # Set by a pack while it runs this loop's `forward_batch` on the rows of that many members folded into one
        # batch (member-major): the batch's loss, hits and scored count are then each member's (``[members]``).
        self.folded_members: int | None = None

    def _to_device(self, split: ArraySplit) -> tuple[torch.Tensor, torch.Tensor]:
        # Read-only from here on: on a GPU these are the process's shared copies (device_data).
        return on_device(split.x, self.device), on_device(split.y, self.device, torch.long)

    def zero_grad(self) -> None:
        """A captured step keeps its gradient tensors (the graph holds their addresses): zeroed, never dropped."""
        self.optimizer.zero_grad(set_to_none=not self.graphed)

    def apply_gradients(self) -> torch.Tensor:
        """The step after the backward: clipping (or just the norm) and AdamW on the gradients the parameters
        hold; the pre-clip norm (on the device). A pack runs it per member after one fused backward."""
        if self.cfg.grad_clip > 0:
            grad_norm = nn.utils.clip_grad_norm_(self.trainable, self.cfg.grad_clip)  # returns the pre-clip norm
        else:
            grad_norm = opt.global_grad_norm(self.trainable)
        self.optimizer.step()
        return grad_norm

    def advance_schedule(self) -> None:
        """After an optimizer step (outside a captured one, which cannot decide on the host)."""
        self.last_lr = opt.scheduled_lr(self.schedule)  # the rate the step just taken used
        self.schedule.step()  # fills the device LR in place (a float on the CPU)

    def train_epoch(self) -> dict[str, float]:
        """One pass over the training split, then validation (see `train_steps`)."""
        return self.train_steps(self.steps_per_epoch)

    def train_round(self) -> dict[str, float]:
        """One Tune iteration: an epoch, or with a steps budget the next `eval_every` steps (the last round
        what is left of `steps`)."""
        if self.cfg.steps is None:
            return self.train_epoch()
        left = self.cfg.steps - self.optimizer_steps
        return self.train_steps(max(1, min(self.cfg.eval_every, left)))

    def train_steps(self, n_steps: int) -> dict[str, float]:
        """`n_steps` optimizer steps, continuing the current pass over the data, then validation.

        Reports the train loss, training accuracy (`train_accuracy_key`), the mean pre-clip gradient norm
        over the steps, `lr` (the rate of the last step), `epoch` (rounds so far) and `optimizer_steps`.
        """
        self.model.train()
        start = time.perf_counter()
        sums = EpochSums(self.device)
        with self.rng.own():
            for step in range(1, n_steps + 1):
                self.train_step(sums)
                if step % DIVERGENCE_CHECK_STEPS == 0:
                    self._check_finite(sums.loss)
        self._check_finite(sums.loss)
        return self.end_round(sums, n_steps, time.perf_counter() - start)

    def end_round(self, sums: EpochSums, n_steps: int, seconds: float) -> dict[str, float]:
        """A round of ``n_steps`` trained (in ``seconds``, before validation): counted, validated, reported."""
        self.epoch += 1
        self.optimizer_steps += n_steps
        metrics = {**sums.means(self.train_accuracy_key), "lr": self.last_lr, "epoch": self.epoch,
                   "optimizer_steps": self.optimizer_steps, "epoch_seconds": seconds}
        return {**metrics, **self.validate(), "tokens_seen": self.tokens_seen}

    def train_step(self, sums: EpochSums) -> None:
        """One batch, forward to optimizer step, added to ``sums``. Nothing in it reads a number back from
        the device (tests/training/test_cuda.py checks so), so the host queues steps ahead of a GPU.

        Captured (`self.captured`): full batches replay the graph; an epoch's last, smaller batch runs the
        same step eagerly, so every row of an epoch is trained on exactly as without capture."""
        idx = self.batches.next()
        inputs = self.batch_inputs(idx)
        if self.captured is not None and len(idx) == self.cfg.batch_size:
            batch, grad_norm = self.captured(inputs)
        else:
            batch, grad_norm = self.train_step_on(inputs)
        self.end_step(sums, batch, grad_norm, len(idx))

    def end_step(self, sums: EpochSums, batch: BatchResult, grad_norm: torch.Tensor, examples: int) -> None:
        """After the optimizer step on ``examples`` rows: the schedule advances, the step joins ``sums``."""
        self.count_step(examples)
        sums.add(batch, grad_norm, examples)

    def count_step(self, examples: int) -> None:
        """An optimizer step on ``examples`` rows was taken: the schedule advances, the tokens are counted (a
        pack adds its members' results to its own sums)."""
        self.advance_schedule()
        self.tokens_seen += examples * self.tokens_per_example

    def batch_inputs(self, idx: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """What one training step consumes for the rows ``idx``, everything random about it drawn: `rows`, then
        `draws` on them."""
        rows = self.rows(idx)
        return rows + self.draws(rows[0])

    def rows(self, idx: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The training rows ``idx`` as a step consumes them (supervised: the rows and their labels)."""
        return self.train_x[idx], self.train_y[idx]

    def draws(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """What this loop's generators draw for the rows ``x`` (none here; pretraining: the mask)."""
        return ()

    def train_step_on(self, inputs: tuple[torch.Tensor, ...]) -> tuple[BatchResult, torch.Tensor]:
        """Forward, backward, clipping and AdamW on ``batch_inputs``'s tensors: the batch's result and the
        pre-clip gradient norm. The schedule is not advanced here (a captured step cannot)."""
        # Autocast's weight cache would hold casts made inside a CUDA graph's capture; off there.
        with autocast(self.device, self.cfg.precision, cache=not self.graphed):
            batch = self.forward_batch(*inputs)
        self.zero_grad()
        batch.loss.backward()
        return batch, self.apply_gradients()

    def _check_finite(self, loss_sum: torch.Tensor) -> None:
        # One host sync per check; a NaN/inf anywhere in the sum stops the trial.
        if not torch.isfinite(loss_sum):
            raise Diverged(f"loss became {float(loss_sum)} at epoch {self.epoch + 1}")

    def padding(self, x: torch.Tensor) -> torch.Tensor | None:
        """The batch's key-padding mask (all False where it has none); None for a task that never pads."""
        return obj.padding_of(x, self.info) if self.padded else None

    def forward_batch(self, *inputs: torch.Tensor) -> BatchResult:
        """The training forward pass on `batch_inputs`'s tensors (random only in dropout)."""
        raise NotImplementedError

    def train_batch(self, x: torch.Tensor, y: torch.Tensor) -> BatchResult:
        """The training forward pass on rows ``x`` with labels ``y``, drawing what the batch needs."""
        raise NotImplementedError

    def batch_loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.train_batch(x, y).loss

    def validate(self) -> dict[str, float]:
        raise NotImplementedError

    def state_dict(self) -> dict:
        return {
            "model": self.model.state_dict(),
            # Plain numbers for the rates, whatever device trained: a checkpoint resumes anywhere.
            "optimizer": opt.plain_lr_state(self.optimizer.state_dict()),
            "schedule": opt.plain_schedule_state(self.schedule.state_dict()),
            "generator": self.generator.get_state(),
            **self.rng.states,
            "epoch": self.epoch,
            "tokens_seen": self.tokens_seen,
            # What the trial trained on, so its one test evaluation runs the same way (training.final_scores).
            "device_in_use": self.device.type,
            "precision_in_use": precision_in_use(self.device, self.cfg.precision),
            "optimizer_steps": self.optimizer_steps,
            **self.batches.position(),  # mid-pass (a steps budget's round ended inside one): the pass's order
        }

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        opt.place_lr(self.optimizer, self.device)
        self.schedule.load_state_dict(state["schedule"])
        self.last_lr = opt.scheduled_lr(self.schedule)
        if self.captured is not None:
            self.captured.reset()  # the graph would still read the optimizer's replaced state tensors
        self.generator.set_state(state["generator"])
        self.rng.load(state)
        self.epoch = int(state["epoch"])
        self.tokens_seen = int(state["tokens_seen"])
        self.optimizer_steps = int(state.get("optimizer_steps", self.epoch * self.steps_per_epoch))
        self.batches.load(state)


class PretrainLoop(EpochLoop):
    """Masked (or causal) denoising on the training split; validated on the val split."""

    def __init__(
        self,
        encoder_cfg: EncoderConfig,
        objective: PretrainObjective,
        info: TaskInfo,
        train: ArraySplit,
        val: ArraySplit,
        cfg: OptimConfig,
    ) -> None:
        self.objective = objective
        torch.manual_seed(cfg.seed)  # before building: the initial weights are part of the seed's run
        model = Pretrainer(encoder_cfg, obj.output_dim(info, objective.loss))
        super().__init__(model, info, unpaired(train), unpaired(val), cfg)
        # Validation masks are fixed (seeded) so val loss is comparable across epochs;
        # training masks are redrawn from mask_generator for every batch served.
        self.val_generator_seed = cfg.seed + 10_000
        self.mask_generator = mask_generator(self.device, cfg.seed, self.generator)
        self.most_frequent = most_frequent_token(self.train_x, info)
        self.trivial: dict[str, float] | None = None  # the trivial predictors' scores, from the first validation

    # Masked-token (or next-element) accuracy, named like the validation one.
    train_accuracy_key = "train_masked_acc"

    def _positions(self, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Where the loss is scored: a fresh mask (drawn by ``generator``, placed on the batch's device), or
        (causal) every position with a next element."""
        if self.objective.kind == "causal":
            return obj.causal_positions(x, self.info)
        return obj.draw_mask(x.shape, self.objective.mask_ratio, generator, self.padding(x), x.device)

    def _loss_and_hits(self, x: torch.Tensor, where: torch.Tensor, net: nn.Module) -> BatchResult:
        info, o = self.info, self.objective
        padding = self.padding(x)
        targets = obj.targets_for(x, info, o.loss)
        if o.kind == "causal":
            pred = net(obj.model_inputs(x, info), padding, causal=True)
            targets = obj.shift_left(targets)
        else:
            pred = net(obj.model_inputs(x, info, where), padding)
        members = self.folded_members
        loss = obj.reconstruction_loss(pred, targets, where, o.loss, members)
        hits = obj.reconstruction_hits(pred.detach(), targets, where, o.loss, info, members)
        return BatchResult(loss, hits, obj.member_sums(where, members))

    def rows(self, idx: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The rows alone: no labels (pretraining never reads them, so they are not gathered)."""
        return (self.train_x[idx],)

    def draws(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (self._positions(x, self.mask_generator),)

    def forward_batch(self, x: torch.Tensor, where: torch.Tensor) -> BatchResult:
        return self._loss_and_hits(x, where, self.net)

    def train_batch(self, x: torch.Tensor, y: torch.Tensor) -> BatchResult:
        return self.forward_batch(x, self._positions(x, self.mask_generator))

    def state_dict(self) -> dict:
        state = super().state_dict()
        if self.mask_generator is not self.generator:
            state["mask_generator"] = self.mask_generator.get_state()
        return state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        # Missing (a checkpoint written on a CPU, resumed on a GPU): the stream resumes, not bit-exactly.
        if self.mask_generator is not self.generator and "mask_generator" in state:
            self.mask_generator.set_state(state["mask_generator"])

    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        """Validation loss and masked accuracy on masks fixed by seed, and (once: they do not change) the
        trivial predictors' scores on the same masks (`trivial_scores`)."""
        self.model.eval()
        gen = torch.Generator(device="cpu").manual_seed(self.val_generator_seed)
        loss_sum, hits, count = 0.0, 0, 0
        trivial = TrivialScores(self.info, self.objective, self.most_frequent) if self.trivial is None else None
        for x in self.val_x.split(EVAL_BATCH):
            where = self._positions(x, gen)
            with autocast(self.device, self.cfg.precision):
                loss, h, c = self._loss_and_hits(x, where, self.model)
            loss_sum, hits, count = loss_sum + float(loss) * int(c), hits + int(h), count + int(c)
            if trivial is not None:
                trivial.add(x, where)
        if trivial is not None:
            self.trivial = trivial.means()
        return {"val_loss": loss_sum / max(count, 1), "val_masked_acc": hits / max(count, 1), **self.trivial}


class FinetuneLoop(EpochLoop):
    """Supervised classification; optionally starts from a pretrained encoder."""

    def __init__(
        self,
        model_cfg: ModelConfig,
        info: TaskInfo,
        train: ArraySplit,
        val: ArraySplit,
        cfg: OptimConfig,
        model: Classifier | None = None,
    ) -> None:
        if model is None:
            torch.manual_seed(cfg.seed)  # before building: the initial weights are part of the seed's run
            model = Classifier(model_cfg)
        super().__init__(model, info, train, val, cfg)
        self.loss_fn = nn.CrossEntropyLoss()

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(obj.model_inputs(x, self.info), self.padding(x))

    def train_batch(self, x: torch.Tensor, y: torch.Tensor) -> BatchResult:
        return self.forward_batch(x, y)

    def forward_batch(self, x: torch.Tensor, y: torch.Tensor) -> BatchResult:
        logits = self.logits(x).float()
        members = self.folded_members
        hits = obj.member_sums(logits.detach().argmax(-1) == y, members)
        if members is None:
            return BatchResult(self.loss_fn(logits, y), hits, len(y))
        loss = F.cross_entropy(logits, y, reduction="none").view(members, -1).mean(1)
        return BatchResult(loss, hits, len(y) // members)

    def validate(self) -> dict[str, float]:
        loss, acc = score(self.model, self.info, self.val_x, self.val_y, self.device, self.cfg.precision)
        return {"val_loss": loss, "val_acc": acc}
