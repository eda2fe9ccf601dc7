"""How much of what the first block sees depends on the data: a check that a model can see its input.

At a token, the first block's input is embed(x) + position code. Its variance over examples and positions
splits into the part that varies with the example at a fixed position (the data's) and the part that varies
with the position alone. A position code that dwarfs the embedded input (a learned N(0, 1) table beside raw
[0, 1] pixels: ~1 % data) leaves the model nearly blind to the image at initialisation.
"""

from __future__ import annotations

import torch

from sptune.training.models.encoder import Encoder


def data_variance_share(block_input: torch.Tensor) -> float:
    """Share of the variance of ``block_input`` (B, L, D) over examples and positions that varies with the
    example at fixed positions: mean over positions of the across-example variance, over the total variance,
    both summed over features."""
    h = block_input.detach().double()
    total = h.reshape(-1, h.shape[-1]).var(dim=0, unbiased=False).sum()
    within = h.var(dim=0, unbiased=False).mean(dim=0).sum()
    return float(within / total) if total > 0 else 0.0


@torch.no_grad()
def encoder_data_share(encoder: Encoder, inputs: torch.Tensor, key_padding: torch.Tensor | None = None) -> float:
    """`data_variance_share` of the first block's input for a batch of model inputs (padding excluded)."""
    encoder.eval()
    h, key_padding = encoder.block_input(inputs, key_padding)
    if key_padding is not None:  # padded tokens are no data: compare real tokens only (the shortest row's)
        h = h[:, : int((~key_padding).sum(dim=1).min())]
    return data_variance_share(h)
