"""Whole models: encoder + classification head, encoder + reconstruction head."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from sptune.training.models.encoder import EncoderConfig
from sptune.training.models.families import build_encoder
from sptune.training.models.heads import ClassificationHead, Pooling, ReconstructionHead, classify, pool


@dataclass(frozen=True)
class ModelConfig:
    encoder: EncoderConfig
    pooling: Pooling = "mean"
    num_classes: int = 10
    paired: bool = False
    # Unidirectional model (spt_causal): attention never looks ahead, in both stages.
    causal: bool = False


class Classifier(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        if cfg.causal and cfg.pooling == "cls":
            # The spec refuses it (model.pooling); here so no other caller builds it either.
            raise ValueError("cls pooling on a causal model reads a position that sees only itself")
        self.cfg = cfg
        self.encoder = build_encoder(cfg.encoder)
        self.head = ClassificationHead(cfg.encoder.d_model, cfg.num_classes, cfg.pooling, cfg.paired)

    def _encode(self, inputs: torch.Tensor, key_padding: torch.Tensor | None) -> torch.Tensor:
        h = self.encoder(inputs, key_padding, self.cfg.causal)
        padding = key_padding
        if padding is not None and self.cfg.encoder.use_cls:
            padding = torch.cat([padding.new_zeros(len(padding), 1), padding], dim=1)
        return pool(h, self.cfg.pooling, padding)

    def forward(self, inputs: torch.Tensor, key_padding: torch.Tensor | None = None) -> torch.Tensor:
        return classify(self._encode, self.head, inputs, key_padding)


class Pretrainer(nn.Module):
    """Encoder + per-position head for the denoising objective (masked or causal)."""

    def __init__(self, encoder_cfg: EncoderConfig, out_dim: int) -> None:
        super().__init__()
        self.encoder = build_encoder(encoder_cfg)
        self.reconstruct = ReconstructionHead(encoder_cfg.d_model, out_dim)
        self.use_cls = encoder_cfg.use_cls

    def forward(
        self, inputs: torch.Tensor, key_padding: torch.Tensor | None = None, causal: bool = False
    ) -> torch.Tensor:
        h = self.encoder(inputs, key_padding, causal)
        if self.use_cls:
            h = h[:, 1:]
        return self.reconstruct(h)


def encoder_state(model_state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The encoder's weights from a Pretrainer/Classifier state dict (heads dropped)."""
    prefix = "encoder."
    return {k[len(prefix) :]: v for k, v in model_state.items() if k.startswith(prefix)}
