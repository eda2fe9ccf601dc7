"""How each variant initialises its classifier and which parameters it trains."""

from __future__ import annotations

from typing import Callable

import torch

from sptune.models import Classifier, ModelConfig, encoder_state

# A variant builder takes the classifier config and (optionally) an SPT checkpoint's
# model state, and returns a ready-to-train model with requires_grad set.
Builder = Callable[[ModelConfig, "dict[str, torch.Tensor] | None"], Classifier]


def _scratch(cfg: ModelConfig, spt_state: dict | None) -> Classifier:
    return Classifier(cfg)


def _spt(cfg: ModelConfig, spt_state: dict | None) -> Classifier:
    if spt_state is None:
        raise ValueError("variant 'spt' needs the selected pretraining checkpoint")
    model = Classifier(cfg)
    # strict: every encoder weight must come from SPT; the reconstruction head is dropped.
    model.encoder.load_state_dict(encoder_state(spt_state), strict=True)
    return model


BUILDERS: dict[str, Builder] = {"scratch": _scratch, "spt": _spt}
NEEDS_PRETRAINING = {"scratch": False, "spt": True}


def build_model(kind: str, cfg: ModelConfig, spt_state: dict | None = None) -> Classifier:
    return BUILDERS[kind](cfg, spt_state)


def trainable_summary(model: torch.nn.Module) -> dict[str, object]:
    """Counts and names of trained parameters (logged per run)."""
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    return {
        "trainable_params": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "total_params": sum(p.numel() for p in model.parameters()),
        "trainable_names": names,
    }
