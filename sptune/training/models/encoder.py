"""Pre-LN transformer encoder with token or continuous inputs."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import nn

from sptune.tasks.base import TaskInfo
from sptune.training.models.attention import KernelChoice, SelfAttention
from sptune.training.models.dropout import Dropout
from sptune.training.models.ssm import SSMMixer

Positions = Literal["sinusoidal", "rotary", "learned", "none"]

# BERT's and GPT-2's init for a learned table: small next to a standardised input, so the model starts out
# seeing its input (a unit-scale table left pixels ~1 % of a token's variance; tests/training/models).
LEARNED_POSITION_STD = 0.02

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
    # The reference's (Amos et al.) fixed table; the spec's default comes from the task (sptune.spec.task_defaults).
    positions: Positions = "sinusoidal"
    # auto: flash-attn wherever it can run (sptune.training.models.attention.attention_kernel), else SDPA.
    attention_kernel: KernelChoice = "auto"
    max_len: int = 1024
    input_kind: Literal["tokens", "continuous"] = "continuous"
    vocab_size: int = 0
    # Continuous inputs carry (value, mask flag) per position in both stages, so the
    # input layer has the same shape in pretraining and finetuning.
    input_channels: int = 2
    use_cls: bool = False
    # "transformer" mixes positions with attention, "ssm" with a diagonal state-space layer; any other name is a
    # plug-in (sptune.training.models.families), built from `options` and `task`.
    family: str = "transformer"
    ssm_state: int = 64
    # A plug-in family's own options (model.options) and the task it reads (what its factory receives).
    options: dict[str, Any] = field(default_factory=dict, hash=False)
    task: TaskInfo | None = None


def sinusoidal_table(length: int, width: int) -> torch.Tensor:
    """(1, length, width) fixed positions of Vaswani et al.: sin in even, cos in odd features, wavelengths
    from 2*pi to 10000*2*pi; each feature has variance ~1/2 over positions."""
    position = torch.arange(length, dtype=torch.float32)[:, None]
    rate = torch.exp(torch.arange(0, width, 2, dtype=torch.float32) * (-math.log(10000.0) / width))
    table = torch.zeros(length, width)
    table[:, 0::2] = torch.sin(position * rate)
    table[:, 1::2] = torch.cos(position * rate[: width // 2])
    return table[None]


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
            # As nn.Linear(1, d) draws them (U(-1, 1)), not at fan-in 2: the mask flag is 0 whenever finetuning,
            # so the value is the one input, as in the reference's finetuning model (Linear(1, d)). At fan-in 2 a
            # standardised pixel starts at a third of the sinusoidal table's variance.
            nn.init.uniform_(self.embed.weight, -1.0, 1.0)
            nn.init.uniform_(self.embed.bias, -1.0, 1.0)
        mark_input_embedding(self.embed)
        n_pos = cfg.max_len + int(cfg.use_cls)
        if cfg.positions == "learned":
            self.positions = nn.Parameter(torch.randn(1, n_pos, cfg.d_model) * LEARNED_POSITION_STD)
        else:
            # sinusoidal: a buffer, not a parameter: fixed, so qk_init's and frozen_attn's copied or frozen maps
            # see the same position code in both models. Not persistent: rebuilt from the config, never saved.
            table = sinusoidal_table(n_pos, cfg.d_model) if cfg.positions == "sinusoidal" else None
            self.register_buffer("positions", table, persistent=False)
        self.cls = nn.Parameter(torch.zeros(1, 1, cfg.d_model)) if cfg.use_cls else None
        self.drop = Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = nn.LayerNorm(cfg.d_model)

    def block_input(
        self, inputs: torch.Tensor, key_padding: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """What the first block receives (before dropout): embedded inputs, [CLS], plus positions."""
        h = self.embed(inputs)
        if self.cls is not None:
            h = torch.cat([self.cls.expand(len(h), -1, -1), h], dim=1)
            if key_padding is not None:
                key_padding = torch.cat([key_padding.new_zeros(len(h), 1), key_padding], dim=1)
        if self.positions is not None:
            h = h + self.positions[:, : h.shape[1]]
        return h, key_padding

    def forward(
        self, inputs: torch.Tensor, key_padding: torch.Tensor | None = None, causal: bool = False
    ) -> torch.Tensor:
        h, key_padding = self.block_input(inputs, key_padding)
        h = self.drop(h)
        for block in self.blocks:
            h = block(h, key_padding, causal)
        return self.norm(h)
