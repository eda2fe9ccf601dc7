"""Pure-PyTorch epoch loops for the two stages (no Ray here).

Each loop owns its model, optimizer, schedule and RNG, trains one epoch per call,
evaluates on the validation split, and round-trips its full state through a plain
dict of tensors and numbers (loadable with ``torch.load(weights_only=True)``).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import torch
from torch import nn

from sptune import objectives as obj
from sptune.device import autocast, pick_device
from sptune.models import Classifier, ModelConfig, Pretrainer
from sptune.models.encoder import EncoderConfig
from sptune.tasks.base import ArraySplit, TaskInfo

EVAL_BATCH = 256


# Steps between divergence checks (each costs a device sync on GPUs); a diverged trial loses at
# most this many steps of compute before it stops.
DIVERGENCE_CHECK_STEPS = 32


class Diverged(RuntimeError):
    """The training loss became NaN or infinite."""


@dataclass(frozen=True)
class OptimConfig:
    lr: float
    batch_size: int
    epochs: int  # the schedule's horizon, even if the scheduler stops the trial earlier
    weight_decay: float = 0.0
    warmup_fraction: float = 0.1
    grad_clip: float = 1.0
    seed: int = 0
    device: str = "auto"
    precision: str = "auto"
    compile: bool = False


def warmup_cosine(
    optimizer: torch.optim.Optimizer, total_steps: int, warmup_fraction: float
) -> torch.optim.lr_scheduler.LambdaLR:
    warmup = max(1, int(total_steps * warmup_fraction))

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
        return 0.5 * (1 + math.cos(math.pi * progress))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


class EpochLoop:
    """Shared machinery: data on the device, shuffling, optimizer, schedule, state."""

    def __init__(self, model: nn.Module, info: TaskInfo, train: ArraySplit, val: ArraySplit, cfg: OptimConfig) -> None:
        self.cfg = cfg
        self.info = info
        self.device = pick_device(cfg.device)
        torch.manual_seed(cfg.seed)
        self.model = model.to(self.device)
        # Forward passes go through `net`; `model` keeps clean state-dict keys for checkpoints.
        self.net = torch.compile(self.model) if cfg.compile else self.model
        # Whole splits live on the device: no per-batch host copies or loader workers.
        self.train_x, self.train_y = self._to_device(train)
        self.val_x, self.val_y = self._to_device(val)
        self.generator = torch.Generator(device="cpu").manual_seed(cfg.seed)
        trainable = [p for p in self.model.parameters() if p.requires_grad]
        fused = self.device.type == "cuda"
        self.optimizer = torch.optim.AdamW(trainable, lr=cfg.lr, weight_decay=cfg.weight_decay, fused=fused)
        steps_per_epoch = math.ceil(len(train) / cfg.batch_size)
        self.schedule = warmup_cosine(self.optimizer, steps_per_epoch * cfg.epochs, cfg.warmup_fraction)
        self.epoch = 0
        self.tokens_seen = 0

    def _to_device(self, split: ArraySplit) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.from_numpy(split.x)
        return x.to(self.device), torch.from_numpy(split.y).long().to(self.device)

    def _batches(self) -> list[torch.Tensor]:
        order = torch.randperm(len(self.train_y), generator=self.generator)
        return list(order.to(self.device).split(self.cfg.batch_size))

    def _step(self, loss: torch.Tensor) -> None:
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.cfg.grad_clip > 0:
            nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip)
        self.optimizer.step()
        self.schedule.step()

    def train_epoch(self) -> dict[str, float]:
        self.model.train()
        start, n = time.perf_counter(), 0
        # The loss sum stays on the device: reading it every step would stall a GPU once per step.
        total = torch.zeros((), device=self.device)
        for step, idx in enumerate(self._batches(), start=1):
            with autocast(self.device, self.cfg.precision):
                loss = self.batch_loss(self.train_x[idx], self.train_y[idx])
            self._step(loss)
            total += loss.detach().float() * len(idx)
            n += len(idx)
            self.tokens_seen += idx.numel() * self.info.seq_len
            if step % DIVERGENCE_CHECK_STEPS == 0:
                self._check_finite(total)
        self._check_finite(total)
        self.epoch += 1
        metrics = {"loss": float(total) / max(n, 1), "epoch": self.epoch, "epoch_seconds": time.perf_counter() - start}
        return {**metrics, **self.validate(), "tokens_seen": self.tokens_seen}

    def _check_finite(self, loss_sum: torch.Tensor) -> None:
        # One host sync per check; a NaN/inf anywhere in the sum stops the trial.
        if not torch.isfinite(loss_sum):
            raise Diverged(f"loss became {float(loss_sum)} at epoch {self.epoch + 1}")

    def batch_loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def validate(self) -> dict[str, float]:
        raise NotImplementedError

    def state_dict(self) -> dict:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "schedule": self.schedule.state_dict(),
            "generator": self.generator.get_state(),
            "epoch": self.epoch,
            "tokens_seen": self.tokens_seen,
        }

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.schedule.load_state_dict(state["schedule"])
        self.generator.set_state(state["generator"])
        self.epoch = int(state["epoch"])
        self.tokens_seen = int(state["tokens_seen"])


@dataclass(frozen=True)
class PretrainObjective:
    kind: str = "masked"  # masked | causal
    mask_ratio: float = 0.5
    loss: str = "l2"


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
        super().__init__(model, info, _unpair(train), _unpair(val), cfg)
        # Validation masks are fixed (seeded) so val loss is comparable across epochs;
        # training masks are redrawn from self.generator for every batch served.
        self.val_generator_seed = cfg.seed + 10_000

    def _loss_and_hits(self, x: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, int, int]:
        info, o = self.info, self.objective
        padding = obj.padding_of(x, info)
        targets = obj.targets_for(x, info, o.loss)
        if o.kind == "causal":
            pred = self.net(obj.model_inputs(x, info), padding, causal=True)
            where, targets = obj.causal_positions(x, info), obj.shift_left(targets)
        else:
            where = obj.draw_mask(x.shape, o.mask_ratio, generator, padding).to(x.device)
            pred = self.net(obj.model_inputs(x, info, where), padding)
        loss = obj.reconstruction_loss(pred, targets, where, o.loss)
        return loss, obj.reconstruction_hits(pred, targets, where, o.loss, info), int(where.sum())

    def batch_loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self._loss_and_hits(x, self.generator)[0]

    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        self.model.eval()
        gen = torch.Generator(device="cpu").manual_seed(self.val_generator_seed)
        loss_sum, hits, count = 0.0, 0, 0
        for x in self.val_x.split(EVAL_BATCH):
            with autocast(self.device, self.cfg.precision):
                loss, h, c = self._loss_and_hits(x, gen)
            loss_sum, hits, count = loss_sum + float(loss) * c, hits + h, count + c
        return {"val_loss": loss_sum / max(count, 1), "val_masked_acc": hits / max(count, 1)}


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
        return self.net(obj.model_inputs(x, self.info), obj.padding_of(x, self.info))

    def batch_loss(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.loss_fn(self.logits(x).float(), y)

    def validate(self) -> dict[str, float]:
        loss, acc = evaluate(self.model, self.info, self.val_x, self.val_y, self.device, self.cfg.precision)
        return {"val_loss": loss, "val_acc": acc}


@torch.no_grad()
def evaluate(
    model: nn.Module, info: TaskInfo, x: torch.Tensor, y: torch.Tensor, device: torch.device, precision: str = "auto"
) -> tuple[float, float]:
    """Mean cross-entropy and accuracy of a classifier on (x, y)."""
    model.eval()
    loss_sum, correct = 0.0, 0
    for xb, yb in zip(x.split(EVAL_BATCH), y.split(EVAL_BATCH), strict=False):
        xb, yb = xb.to(device), yb.to(device)
        with autocast(device, precision):
            logits = model(obj.model_inputs(xb, info), obj.padding_of(xb, info)).float()
        loss_sum += float(nn.functional.cross_entropy(logits, yb, reduction="sum"))
        correct += int((logits.argmax(-1) == yb).sum())
    return loss_sum / max(len(y), 1), correct / max(len(y), 1)


def _unpair(split: ArraySplit) -> ArraySplit:
    """Paired tasks pretrain on individual documents: (N, 2, L) -> (2N, L)."""
    if split.x.ndim == 3 and split.x.shape[1] == 2:
        x = split.x.reshape(-1, split.x.shape[-1])
        return ArraySplit(x, split.y.repeat(2))
    return split
