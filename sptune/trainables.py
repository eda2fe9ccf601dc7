"""Thin Ray Tune wrappers around the pure-PyTorch loops in `sptune.train`.

One `step()` is one epoch, so ASHA's time unit is the epoch. Checkpoints hold the
loop's whole state (model, optimizer, schedule, RNG) so a resumed trial continues
exactly; they are plain tensors/numbers, loaded with ``weights_only=True``.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from ray import tune

from sptune.build import classifier_config, encoder_config
from sptune.checkpoints import STATE_FILE, load_state
from sptune.spec import SweepSpec
from sptune.tasks.base import TaskSplits
from sptune.train import Diverged, FinetuneLoop, OptimConfig, PretrainLoop, PretrainObjective
from sptune.variants import build_model, trainable_summary


def _set_threads(cpus: float) -> None:
    # Each trial gets its CPU share; more threads than that oversubscribes the cores.
    torch.set_num_threads(max(1, math.floor(cpus)))


def _optim_config(config: dict, spec: SweepSpec, epochs: int, weight_decay: float) -> OptimConfig:
    t = spec.training
    return OptimConfig(
        lr=float(config["lr"]),
        batch_size=int(config["batch_size"]),
        epochs=epochs,
        weight_decay=weight_decay,
        warmup_fraction=t.warmup_fraction,
        grad_clip=t.grad_clip,
        seed=int(config.get("seed", spec.seed)),
        device=t.device,
        precision=t.precision,
        compile=t.compile,
    )


class _EpochTrainable(tune.Trainable):
    """Shared step/checkpoint logic; subclasses build `self.loop` in `_build`."""

    score_key = "val_acc"
    higher_is_better = True

    def setup(self, config: dict, spec: SweepSpec, data: TaskSplits, **kwargs) -> None:
        self.spec, self.data, self.extra = spec, data, kwargs
        _set_threads(spec.resources.cpu)
        self._build(config)

    def reset_config(self, new_config: dict) -> bool:
        # Lets Ray reuse this actor for the next trial instead of starting a new process.
        self._build(new_config)
        return True

    def _build(self, config: dict) -> None:
        raise NotImplementedError

    def _start_tracking(self) -> None:
        self.best_score, self.best_epoch = -math.inf, 0

    def step(self) -> dict:
        try:
            metrics = self.loop.train_epoch()
        except Diverged as err:
            # Stop at once; mark it so selection never picks it and the report counts it.
            return {
                "diverged": 1,
                "error": str(err),
                "done": True,
                self.score_key: self._worst(),
                "epoch": self.loop.epoch + 1,
                "best_" + self.score_key: self._best_or_worst(),
            }
        score = metrics[self.score_key] if self.higher_is_better else -metrics[self.score_key]
        if score > self.best_score:
            self.best_score, self.best_epoch = score, metrics["epoch"]
        best = self.best_score if self.higher_is_better else -self.best_score
        # Variants sharing a Tuner may train for different numbers of epochs.
        done = metrics["epoch"] >= self.max_epochs
        return {**metrics, "diverged": 0, "best_" + self.score_key: best, "best_epoch": self.best_epoch, "done": done}

    def _worst(self) -> float:
        return -math.inf if self.higher_is_better else math.inf

    def _best_or_worst(self) -> float:
        if self.best_score == -math.inf:
            return self._worst()
        return self.best_score if self.higher_is_better else -self.best_score

    def save_checkpoint(self, checkpoint_dir: str) -> str:
        state = {**self.loop.state_dict(), "best_score": self.best_score, "best_epoch": self.best_epoch}
        # Dropout draws from torch's global generator: without it a trial paused at a rung (and
        # resumed on any actor) would train on differently from one that went straight on.
        state["torch_rng"] = torch.get_rng_state()
        if torch.cuda.is_available():
            state["cuda_rng"] = torch.cuda.get_rng_state()
        torch.save(state, Path(checkpoint_dir) / STATE_FILE)
        return checkpoint_dir

    def load_checkpoint(self, checkpoint: str) -> None:
        state = load_state(checkpoint)
        self.loop.load_state_dict(state)
        self.best_score, self.best_epoch = float(state["best_score"]), int(state["best_epoch"])
        if "torch_rng" in state:  # absent from checkpoints written before it was saved
            torch.set_rng_state(state["torch_rng"])
        if "cuda_rng" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state(state["cuda_rng"])


class PretrainTrainable(_EpochTrainable):
    """Masked (or causal) self-pretraining on the task's own training split."""

    score_key = "val_loss"
    higher_is_better = False

    def _build(self, config: dict) -> None:
        p = self.spec.pretrain
        self.loop = PretrainLoop(
            encoder_config(self.spec.model, self.data.info),
            PretrainObjective(config.get("objective", p.objective), p.mask_ratio, p.loss),
            self.data.info,
            self.data.train,
            self.data.val,
            _optim_config(config, self.spec, p.epochs, p.weight_decay),
        )
        self.max_epochs = p.epochs
        self._start_tracking()


class FinetuneTrainable(_EpochTrainable):
    """Classification with labels, from random init or the selected SPT checkpoint."""

    def _build(self, config: dict) -> None:
        variant = config["variant"]
        kind = self.spec.variant_kind(variant)
        # One Tuner trains every variant: each finds its own SPT checkpoint (spt_cross: another task's).
        spt_dir = self.extra.get("spt_checkpoints", {}).get(variant)
        spt_state = load_state(spt_dir)["model"] if spt_dir else None
        cfg = classifier_config(
            self.spec.model, self.data.info, causal=self.spec.variant_objective(variant) == "causal"
        )
        lm = self.spec.language_model
        # Seed before building: a reused actor must not carry RNG state into the next trial's init.
        torch.manual_seed(int(config.get("seed", self.spec.seed)))
        model = build_model(kind, cfg, spt_state, lm.path if lm else None)
        self.trainable = trainable_summary(model)
        epochs = self.max_epochs = self.spec.variant_epochs(variant)
        weight_decay = self.spec.finetune.weight_decay
        self.loop = FinetuneLoop(
            cfg,
            self.data.info,
            self.data.train,
            self.data.val,
            _optim_config(config, self.spec, epochs, weight_decay),
            model=model,
        )
        self._start_tracking()

    def step(self) -> dict:
        metrics = super().step()
        if metrics.get("epoch") == 1:
            # Which parameters train is part of the variant's definition: log it once.
            metrics["trainable_params"] = self.trainable["trainable_params"]
            metrics["total_params"] = self.trainable["total_params"]
            params = {"trainable_names": ",".join(self.trainable["trainable_names"])}
            mapping = getattr(self.loop.model, "init_mapping", None)
            if mapping:  # spt_cross: which weights came from the other task's SPT
                params.update({f"init_{k}": ",".join(v) for k, v in mapping.items()})
            metrics["mlflow_params"] = params
        return metrics
