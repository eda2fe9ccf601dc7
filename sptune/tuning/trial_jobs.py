"""What a trial trains, built from its config: a pretraining or a finetuning job around a pure-PyTorch loop
(`sptune.training.loops`). The trainable builds one per trial; a pack's executor builds its members with the
same `job_for`, so a member is exactly the solo trial it stands for."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from sptune.rules.budgets import Budget
from sptune.spec import ModelSpec, SweepSpec
from sptune.storage import relocated
from sptune.tasks.base import TaskSplits
from sptune.training.checkpoint_files import load_state
from sptune.training.device import precision_in_use
from sptune.training.loops import EpochLoop, FinetuneLoop, PretrainLoop, PretrainObjective
from sptune.training.model_configs import encoder_config, optim_config, variant_classifier_config
from sptune.training.variants import build_model, trainable_summary


def _model_spec(config: dict, spec: SweepSpec) -> ModelSpec:
    """The model section with a searched dropout applied (shapes never change, so checkpoints fit)."""
    if "dropout" not in config:
        return spec.model
    return spec.model.model_copy(update={"dropout": float(config["dropout"])})


def loop_params(loop: EpochLoop) -> dict[str, Any]:
    """Every training setting the loop runs with, and what "auto" resolved to."""
    cfg = loop.cfg
    params = {f"optim.{f.name}": getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    params["optim.device_in_use"] = loop.device.type
    params["optim.precision_in_use"] = precision_in_use(loop.device, cfg.precision)
    return params


class Pretraining:
    """A pretraining trial: masked (or causal) self-pretraining on its task's own training split."""

    score_key = "val_loss"  # the per-epoch score sptune.rules.ranking ranks epochs by

    def __init__(self, spec: SweepSpec, data: TaskSplits, config: dict, budget: Budget) -> None:
        p = spec.pretrain
        self.loop: EpochLoop = PretrainLoop(
            encoder_config(_model_spec(config, spec), data.info),
            PretrainObjective(config.get("objective", p.objective), p.mask_ratio, p.loss),
            data.info,
            data.train,
            data.val,
            optim_config(config, spec, budget, p.weight_decay, p.warmup_steps, p.schedule),
        )
        self.budget = budget

    def first_epoch_metrics(self) -> dict[str, Any]:
        return {}

    def run_params(self) -> dict[str, Any]:
        return {}

    def optim_params(self) -> dict[str, Any]:
        return loop_params(self.loop)


class Finetuning:
    """A finetuning trial: classification with labels, from random init or its SPT checkpoint."""

    score_key = "val_acc"

    def __init__(self, spec: SweepSpec, data: TaskSplits, config: dict, budget: Budget) -> None:
        variant = config["variant"]
        # An SPT variant's trial names its checkpoint (a re-run with rerun_pretrain: its own seed's).
        spt_dir = config.get("spt_checkpoint")
        spt_dir = relocated(spt_dir) if spt_dir else spt_dir  # recorded before its study folder moved
        spt_state = load_state(spt_dir)["model"] if spt_dir else None
        cfg = variant_classifier_config(spec, data.info, variant, _model_spec(config, spec))
        lm = spec.language_model
        # Seed before building: a reused actor must not carry RNG state into the next trial's init.
        torch.manual_seed(int(config.get("seed", spec.seed)))
        model = build_model(spec.variant_kind(variant), cfg, spt_state, lm.path if lm else None)
        self.trainable = trainable_summary(model)
        self.budget = budget
        optim = optim_config(config, spec, self.budget, spec.finetune.weight_decay)
        self.loop: EpochLoop = FinetuneLoop(cfg, data.info, data.train, data.val, optim, model=model)

    def first_epoch_metrics(self) -> dict[str, Any]:
        # Which parameters train is part of the variant's definition: logged once.
        return {k: self.trainable[k] for k in ("trainable_params", "total_params")}

    def run_params(self) -> dict[str, Any]:
        params = {"trainable_names": ",".join(self.trainable["trainable_names"])}
        mapping = getattr(self.loop.model, "init_mapping", None)
        if mapping:  # spt_cross: which weights came from the other task's SPT
            params.update({f"init_{k}": ",".join(v) for k, v in mapping.items()})
        return params

    def optim_params(self) -> dict[str, Any]:
        return loop_params(self.loop)


def job_for(spec: SweepSpec, data: TaskSplits, config: dict, budget: Budget) -> Pretraining | Finetuning:
    """A config that names an `objective` pretrains, any other finetunes."""
    kind = Pretraining if "objective" in config else Finetuning
    return kind(spec, data, config, budget)
