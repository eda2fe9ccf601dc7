"""Thin Ray Tune wrappers around the pure-PyTorch loops in `sptune.training.loops`.

One `step()` is one round: an epoch, or an evaluation round of a steps budget (sptune.plan.budgets), so the
schedulers' time unit is the same for every trial of a search. Checkpoints hold the
loop's whole state (model, optimizer, schedule, and every RNG training draws from: the
loop's shuffle/mask generator and its torch RNG stream for dropout, CPU and CUDA) so a
resumed trial continues exactly as if never interrupted; they are plain tensors/numbers,
loaded with ``weights_only=True``.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import torch
from ray import tune

from sptune.judging.convergence import trial_done
from sptune.judging.ranking import rank_key
from sptune.plan.budgets import Budget
from sptune.spec import ModelSpec, SweepSpec
from sptune.tasks.base import TaskSplits
from sptune.training.checkpoint_files import STATE_FILE, load_state
from sptune.training.device import precision_in_use
from sptune.training.loops import Diverged, FinetuneLoop, OptimConfig, PretrainLoop, PretrainObjective
from sptune.training.model_configs import encoder_config, variant_classifier_config
from sptune.training.variants import build_model, trainable_summary
from sptune.tuning.callbacks.live_metrics import export_epoch

CHECKPOINT_RANK = "checkpoint_rank"  # the CheckpointConfig score attribute: see _EpochTrainable.step


def _set_threads(cpus: float) -> None:
    # Each trial gets its CPU share; more threads than that oversubscribes the cores.
    torch.set_num_threads(max(1, math.floor(cpus)))


def _optim_config(config: dict, spec: SweepSpec, budget: Budget, weight_decay: float) -> OptimConfig:
    """The trial's optimiser settings: searched values from its config, its budget's horizon, the rest from the spec."""
    t = spec.training
    return OptimConfig(
        lr=float(config["lr"]),
        batch_size=int(config["batch_size"]),
        **budget.optim_fields(),
        weight_decay=float(config.get("weight_decay", weight_decay)),
        warmup_fraction=float(config.get("warmup_fraction", t.warmup_fraction)),
        grad_clip=t.grad_clip,
        betas=tuple(t.betas),
        eps=t.eps,
        seed=int(config.get("seed", spec.seed)),
        device=t.device,
        precision=t.precision,
        compile=t.compile,
        deterministic=t.deterministic,
    )


def _model_spec(config: dict, spec: SweepSpec) -> ModelSpec:
    """The model section with a searched dropout applied (shapes never change, so checkpoints fit)."""
    if "dropout" not in config:
        return spec.model
    return spec.model.model_copy(update={"dropout": float(config["dropout"])})


class _EpochTrainable(tune.Trainable):
    """Shared step/checkpoint logic; subclasses build `self.loop` in `_build`."""

    score_key = "val_acc"  # the per-epoch score ranked by sptune.judging.ranking ("val_loss" when pretraining)

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
        self.best: dict[str, float] = {}  # the best epoch's val_acc / val_loss / epoch (sptune.judging.ranking's rule)
        self.improvements = 0

    def step(self) -> dict:
        tokens_before = self.loop.tokens_seen  # cumulative: the epoch's own tokens give its tokens/s
        result = self._train_one_epoch()
        # Live view (Prometheus): from the numbers the epoch returned; the loop itself knows no Ray.
        export_epoch(self.spec.name, self.trial_id, self.config, result, tokens_before)
        if result.get("epoch") == 1:
            # Once per trial (diverged ones too): facts MLflow logs as the child run's params.
            result["mlflow_params"] = self._run_params()
        return result

    def _run_params(self) -> dict[str, Any]:
        """Every training setting the loop runs with, and what "auto" resolved to."""
        cfg = self.loop.cfg
        params = {f"optim.{f.name}": getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
        params["optim.device_in_use"] = self.loop.device.type
        params["optim.precision_in_use"] = precision_in_use(self.loop.device, cfg.precision)
        return params

    def _train_one_epoch(self) -> dict:
        try:
            metrics = self.loop.train_round()
        except Diverged as err:
            # Stop at once; mark it so selection never picks it and the report counts it.
            return {
                "diverged": 1,
                "error": str(err),
                "done": True,
                self.score_key: self._worst(),
                "epoch": self.loop.epoch + 1,
                "best_" + self.score_key: self.best.get(self.score_key, self._worst()),
                CHECKPOINT_RANK: 0,
            }
        improved = not self.best or rank_key(metrics, self.score_key) < rank_key(self.best, self.score_key)
        if improved:
            self.best = {k: float(metrics[k]) for k in ("val_acc", "val_loss", "epoch") if k in metrics}
            self.improvements += 1
        return {
            **metrics,
            "diverged": 0,
            "best_" + self.score_key: self.best[self.score_key],
            "best_epoch": int(self.best["epoch"]),
            # The checkpoint kept as the trial's best has the highest rank: the latest *improvement*, the
            # epoch logged as best_epoch (sptune.tuning.callbacks.checkpoint_pruning); epochs that do not improve rank 0.
            CHECKPOINT_RANK: self.improvements if improved else 0,
            # Each trial's own budget (variants sharing a Tuner differ); with until_converged, on while improving.
            "done": trial_done(metrics["epoch"], int(self.best["epoch"]), self.budget),
        }

    def _worst(self) -> float:
        return -math.inf if self.score_key == "val_acc" else math.inf

    def save_checkpoint(self, checkpoint_dir: str) -> str:
        state = {**self.loop.state_dict(), "best": self.best, "improvements": self.improvements}
        torch.save(state, Path(checkpoint_dir) / STATE_FILE)
        return checkpoint_dir

    def load_checkpoint(self, checkpoint: str) -> None:
        state = load_state(checkpoint)
        self.loop.load_state_dict(state)
        self.best = {k: float(v) for k, v in state["best"].items()}
        self.improvements = int(state["improvements"])


class PretrainTrainable(_EpochTrainable):
    """Masked (or causal) self-pretraining on the task's own training split."""

    score_key = "val_loss"

    def _build(self, config: dict) -> None:
        p = self.spec.pretrain
        self.loop = PretrainLoop(
            encoder_config(_model_spec(config, self.spec), self.data.info),
            PretrainObjective(config.get("objective", p.objective), p.mask_ratio, p.loss),
            self.data.info,
            self.data.train,
            self.data.val,
            _optim_config(config, self.spec, self.spec.pretrain_budget(), p.weight_decay),
        )
        self.budget = self.spec.pretrain_budget()
        self._start_tracking()


class FinetuneTrainable(_EpochTrainable):
    """Classification with labels, from random init or the selected SPT checkpoint."""

    def _build(self, config: dict) -> None:
        variant = config["variant"]
        kind = self.spec.variant_kind(variant)
        # One Tuner trains every variant: each finds its own SPT checkpoint (spt_cross: another task's);
        # a re-run names its own in its config (with rerun_pretrain: the one pretrained with its seed).
        spt_dir = config.get("spt_checkpoint") or self.extra.get("spt_checkpoints", {}).get(variant)
        spt_state = load_state(spt_dir)["model"] if spt_dir else None
        cfg = variant_classifier_config(self.spec, self.data.info, variant, _model_spec(config, self.spec))
        lm = self.spec.language_model
        # Seed before building: a reused actor must not carry RNG state into the next trial's init.
        torch.manual_seed(int(config.get("seed", self.spec.seed)))
        model = build_model(kind, cfg, spt_state, lm.path if lm else None)
        self.trainable = trainable_summary(model)
        budget = self.budget = self.spec.variant_budget(variant)
        weight_decay = self.spec.finetune.weight_decay
        self.loop = FinetuneLoop(
            cfg,
            self.data.info,
            self.data.train,
            self.data.val,
            _optim_config(config, self.spec, budget, weight_decay),
            model=model,
        )
        self._start_tracking()

    def step(self) -> dict:
        metrics = super().step()
        if metrics.get("epoch") == 1:
            # Which parameters train is part of the variant's definition: log it once.
            metrics["trainable_params"] = self.trainable["trainable_params"]
            metrics["total_params"] = self.trainable["total_params"]
        return metrics

    def _run_params(self) -> dict[str, Any]:
        params = {**super()._run_params(), "trainable_names": ",".join(self.trainable["trainable_names"])}
        mapping = getattr(self.loop.model, "init_mapping", None)
        if mapping:  # spt_cross: which weights came from the other task's SPT
            params.update({f"init_{k}": ",".join(v) for k, v in mapping.items()})
        return params


class StudyTrainable(FinetuneTrainable):
    """Every stage of a study in one Tuner: a pretraining config (it names its `objective`) trains as
    `PretrainTrainable` does, any other as `FinetuneTrainable`, so a reused actor takes trials of any
    stage. `stage_data` (stage label -> data) holds the stages that train on other data (spt_cross
    pretrains on its source task); every other stage trains on `data`."""

    def setup(self, config: dict, spec: SweepSpec, data: TaskSplits, **kwargs) -> None:
        self.study_data = data
        super().setup(config, spec, data, **kwargs)

    def _build(self, config: dict) -> None:
        self.data = self.extra.get("stage_data", {}).get(config.get("stage"), self.study_data)
        self.pretraining = "objective" in config
        # The score each epoch is ranked by (sptune.judging.ranking) follows the trial's phase, not the class.
        self.score_key = "val_loss" if self.pretraining else "val_acc"
        if self.pretraining:
            PretrainTrainable._build(self, config)
        else:
            FinetuneTrainable._build(self, config)

    def step(self) -> dict:
        return _EpochTrainable.step(self) if self.pretraining else super().step()

    def _run_params(self) -> dict[str, Any]:
        return _EpochTrainable._run_params(self) if self.pretraining else super()._run_params()
