"""Pre-LN transformer encoder with token or continuous inputs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from sptune.training.models.attention import KernelChoice, SelfAttention
from sptune.training.models.dropout import Dropout
from sptune.training.models.ssm import SSMMixer

Positions = Literal["rotary", "learned", "none"]

# Attribute on the layer that maps raw inputs to the model width (a token or value embedding).
INPUT_EMBEDDING = "is_input_embedding"


def mark_input_embedding(module: nn.Module) -> nn.Module:
    """Tag a model's input layer so the optimizer never decays it (`sptune.training.optimizer.parameter_groups`).

    A tag, not a type check: continuous values are embedded by an ordinary nn.Linear, which
    by type alone is indistinguishable from the linear maps inside the blocks."""
    setattr(module, INPUT_EMBEDDING, True)
    return module


@dataclass(frozen=True)
class EncoderConfig:
    d_model: int = 64
    n_layers: int = 3
    n_heads: int = 4
    d_ff: int = 128
    dropout: float = 0.1
    # Separate from `dropout`: any attention dropout forces PyTorch's math attention kernel on CPU,
    # which materialises the L x L attention matrices (docs/design/training.md).
    attention_dropout: float = 0.0
    positions: Positions = "learned"
    # auto: flash-attn wherever it can run (sptune.training.models.attention.attention_kernel), else SDPA.
    attention_kernel: KernelChoice = "auto"
    max_len: int = 1024
    input_kind: Literal["tokens", "continuous"] = "continuous"
    vocab_size: int = 0
    # Continuous inputs carry (value, mask flag) per position in both stages, so the
    # input layer has the same shape in pretraining and finetuning.
    input_channels: int = 2
    use_cls: bool = False
    # "transformer" mixes positions with attention, "ssm" with a diagonal state-space layer.
    family: Literal["transformer", "ssm"] = "transformer"
    ssm_state: int = 64


class Block(nn.Module):
    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        self.cfg_family = cfg.family
        self.norm1 = nn.LayerNorm(cfg.d_model)
        if cfg.family == "ssm":
            self.ssm: nn.Module = SSMMixer(cfg.d_model, cfg.ssm_state, cfg.dropout)
        else:
            self.attn = SelfAttention(
                cfg.d_model, cfg.n_heads, cfg.attention_dropout, cfg.positions == "rotary", cfg.attention_kernel
            )
        self.norm2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d_model, cfg.d_ff), nn.GELU(), Dropout(cfg.dropout), nn.Linear(cfg.d_ff, cfg.d_model)
        )
        self.drop = Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor, key_padding: torch.Tensor | None, causal: bool) -> torch.Tensor:
        mixer = self.ssm if self.cfg_family == "ssm" else self.attn
        x = x + self.drop(mixer(self.norm1(x), key_padding, causal))
        return x + self.drop(self.mlp(self.norm2(x)))


class Encoder(nn.Module):
    """Maps inputs (B, L) token ids or (B, L, C) continuous features to (B, L', d_model).

    With ``use_cls`` a learned [CLS] vector is prepended (L' = L + 1).
    """

    def __init__(self, cfg: EncoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        if cfg.input_kind == "tokens":
            self.embed: nn.Module = nn.Embedding(cfg.vocab_size, cfg.d_model)
        else:
            self.embed = nn.Linear(cfg.input_channels, cfg.d_model)
        mark_input_embedding(self.embed)
        n_pos = cfg.max_len + int(cfg.use_cls)
        self.positions = nn.Parameter(torch.zeros(1, n_pos, cfg.d_model)) if cfg.positions == "learned" else None
        if self.positions is not None:
            # Unit-scale positions (like nn.Embedding): tiny ones leave attention + pooling
            # nearly permutation-invariant, and pixel tasks then learn very slowly.
            nn.init.normal_(self.positions, std=1.0)
        self.cls = nn.Parameter(torch.zeros(1, 1, cfg.d_model)) if cfg.use_cls else None
        self.drop = Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = nn.LayerNorm(cfg.d_model)

    def forward(
        self, inputs: torch.Tensor, key_padding: torch.Tensor | None = None, causal: bool = False
    ) -> torch.Tensor:
        h = self.embed(inputs)
        if self.cls is not None:
            h = torch.cat([self.cls.expand(len(h), -1, -1), h], dim=1)
            if key_padding is not None:
                key_padding = torch.cat([key_padding.new_zeros(len(h), 1), key_padding], dim=1)
        if self.positions is not None:
            h = h + self.positions[:, : h.shape[1]]
        h = self.drop(h)
        for block in self.blocks:
            h = block(h, key_padding, causal)
        return self.norm(h)
