"""`gru`: a recurrent model family (not a transformer) for sptune.

Each layer runs a forward GRU and, unless the model is causal, a backward one, and mixes both into the model
width with a residual connection. Causal (scratch_causal, spt_causal): the backward GRU is skipped, so no position
sees a later one. sptune adds the heads, pooling, SPT and the variants.
"""

from __future__ import annotations

import torch
from torch import nn

from sptune.plugins import ModelFamily, ModelSection, SpecError, TaskInfo

CELLS = ("gru", "lstm")


class GRULayer(nn.Module):
    def __init__(self, d_model: int, dropout: float, cell: str) -> None:
        super().__init__()
        rnn = nn.GRU if cell == "gru" else nn.LSTM
        self.norm = nn.LayerNorm(d_model)
        self.forward_rnn = rnn(d_model, d_model, batch_first=True)
        self.backward_rnn = rnn(d_model, d_model, batch_first=True)
        self.mix = nn.Linear(2 * d_model, d_model)
        self.drop = nn.Dropout(dropout)

    def forward(self, h: torch.Tensor, causal: bool) -> torch.Tensor:
        x = self.norm(h)
        ahead, _ = self.forward_rnn(x)
        behind = torch.zeros_like(ahead) if causal else self.backward_rnn(x.flip(1))[0].flip(1)
        return h + self.drop(self.mix(torch.cat([ahead, behind], dim=-1)))


class GRUEncoder(nn.Module):
    """(B, L) token ids or (B, L, C) continuous features -> (B, L, d_model)."""

    def __init__(self, model: ModelSection, info: TaskInfo) -> None:
        super().__init__()
        if model.options["cell"] not in CELLS:
            raise SpecError("model.options.cell", f"unknown cell {model.options['cell']!r}", "use gru or lstm")
        d = model.d_model
        self.embed = (
            nn.Embedding(info.vocab_size, d) if info.input_kind == "tokens" else nn.Linear(model.input_channels, d)
        )
        self.layers = nn.ModuleList(GRULayer(d, model.dropout, model.options["cell"]) for _ in range(model.n_layers))
        self.norm = nn.LayerNorm(d)

    def forward(
        self, inputs: torch.Tensor, key_padding: torch.Tensor | None = None, causal: bool = False
    ) -> torch.Tensor:
        h = self.embed(inputs)
        if key_padding is not None:
            h = h.masked_fill(key_padding.unsqueeze(-1), 0.0)  # padding carries nothing into the state
        for layer in self.layers:
            h = layer(h, causal)
        return self.norm(h)


GRU = ModelFamily(
    name="gru",
    factory=GRUEncoder,
    kinds={"scratch", "spt", "scratch_causal", "spt_causal", "spt_cross"},
    description="stacked bidirectional GRU layers (forward only when causal)",
    options={"cell": "gru"},
)
