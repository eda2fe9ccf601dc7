"""Spec + task info -> the model and optimiser configs a trial trains with (shared by trials, selection,
test evaluation and benchmarks)."""

from __future__ import annotations

from sptune.rules.budgets import Budget
from sptune.spec import ModelSpec, SweepSpec
from sptune.tasks.base import TaskInfo
from sptune.training.device import trial_device
from sptune.training.loops import OptimConfig
from sptune.training.models import EncoderConfig, ModelConfig


def encoder_config(model: ModelSpec, info: TaskInfo) -> EncoderConfig:
    return EncoderConfig(
        d_model=model.d_model,
        n_layers=model.n_layers,
        n_heads=model.n_heads,
        d_ff=model.d_ff,
        dropout=model.dropout,
        attention_dropout=model.attention_dropout,
        attention_kernel=model.attention_kernel,
        positions=model.positions,
        max_len=info.seq_len,
        input_kind=info.input_kind,
        vocab_size=info.vocab_size,
        use_cls=model.pooling == "cls",
        family=model.family,
        ssm_state=model.ssm_state,
        options=dict(model.options),
        task=info,
    )


def classifier_config(model: ModelSpec, info: TaskInfo, causal: bool = False) -> ModelConfig:
    return ModelConfig(
        encoder=encoder_config(model, info),
        pooling=model.pooling,
        num_classes=info.num_classes,
        paired=info.paired,
        causal=causal,
    )


def variant_classifier_config(
    spec: SweepSpec, info: TaskInfo, variant: str, model: ModelSpec | None = None
) -> ModelConfig:
    """The classifier config of one variant: causal exactly when its kind's model is (the kinds table).
    ``model`` replaces the spec's model section (a trial's searched dropout)."""
    return classifier_config(model or spec.model, info, causal=spec.variant_is_causal(variant))


def optim_config(
    config: dict,
    spec: SweepSpec,
    budget: Budget,
    weight_decay: float,
    warmup_steps: int | None = None,
    schedule: str | None = None,
) -> OptimConfig:
    """The trial's optimiser settings: searched values from its config, its budget's horizon, the rest from the spec.
    ``warmup_steps``, ``schedule``: the stage's own (pretrain.warmup_steps, pretrain.schedule), else training's."""
    t = spec.training
    return OptimConfig(
        lr=float(config["lr"]),
        batch_size=int(config["batch_size"]),
        **budget.optim_fields(),
        weight_decay=float(config.get("weight_decay", weight_decay)),
        warmup_fraction=float(config.get("warmup_fraction", t.warmup_fraction)),
        # A searched warmup_fraction replaces the fixed warm-up in steps.
        warmup_steps=None if "warmup_fraction" in config else warmup_steps or t.warmup_steps,
        schedule=schedule or t.schedule,
        grad_clip=t.grad_clip,
        betas=tuple(t.betas),
        eps=t.eps,
        seed=int(config.get("seed", spec.seed)),
        device=trial_device(t.device, spec.resources.gpu),
        precision=t.precision,
        compile=t.compile,
        deterministic=t.deterministic,
    )
