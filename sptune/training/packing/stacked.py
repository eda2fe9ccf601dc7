"""A pack's model: the members' model as one network over their rows folded into one batch (HFTA's design).

Activations are the members' batches stacked member-major along the batch dimension, ``[K·B, ...]``, so every
module without parameters (pooling, heads' concatenations, masks, rotary positions, the objectives' per-example
code) runs on them unchanged, and attention is plain SDPA (or flash-attn) on ``[K·B, H, L, D]``: rows never mix,
so each member's rows see what they see alone, on whichever kernel one trial's call picks, masks included. Only
the modules that hold parameters know the member dimension: their parameters are ``[K, ...]`` (`pack_params`),
linear layers are batched matmuls (``baddbmm``), layer norms scale and shift per member, an embedding looks up
member k's rows of one ``[K·V, D]`` table. Nothing here runs under ``vmap``.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch import nn

from sptune.training.models.encoder import Encoder
from sptune.training.packing.noise_dropout import NoiseFeed, fed_template


class MemberLinear(nn.Module):
    """`nn.Linear` of K members: weight ``[K, out, in]``, bias ``[K, out]``; input ``[K·B, ..., in]``."""

    def __init__(self, original: nn.Linear, members: int) -> None:
        super().__init__()
        self.members = members
        self.weight, self.bias = original.weight, original.bias  # replaced by the stacked ones (`pack_params`)

    @property
    def out_features(self) -> int:
        return self.weight.shape[-2]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.reshape(self.members, -1, x.shape[-1])
        weight = self.weight.transpose(1, 2)
        out = torch.bmm(rows, weight) if self.bias is None else torch.baddbmm(self.bias.unsqueeze(1), rows, weight)
        return out.reshape(*x.shape[:-1], out.shape[-1])


class MemberLayerNorm(nn.Module):
    """`nn.LayerNorm` (over the last dimension) of K members: weight and bias ``[K, D]``."""

    def __init__(self, original: nn.LayerNorm, members: int) -> None:
        super().__init__()
        if len(original.normalized_shape) != 1 or not original.elementwise_affine:
            raise ValueError("a pack's layer norm normalises the last dimension with a scale and a shift")
        self.members, self.eps, self.shape = members, original.eps, original.normalized_shape
        self.weight, self.bias = original.weight, original.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = F.layer_norm(x, self.shape, None, None, self.eps)
        rows = normed.reshape(self.members, -1, x.shape[-1])
        return torch.addcmul(self.bias.unsqueeze(1), rows, self.weight.unsqueeze(1)).reshape(x.shape)


class MemberEmbedding(nn.Module):
    """`nn.Embedding` of K members: weight ``[K, V, D]``, read as one ``[K·V, D]`` table, member k's ids offset by
    k·V."""

    def __init__(self, original: nn.Embedding, members: int) -> None:
        super().__init__()
        if original.padding_idx is not None or original.max_norm is not None:
            raise ValueError("a pack's embedding has no padding_idx or max_norm")
        self.members, self.vocab = members, original.num_embeddings
        self.weight = original.weight
        self.register_buffer("offsets", torch.arange(members)[:, None] * self.vocab, persistent=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        shifted = (ids.reshape(self.members, -1) + self.offsets).reshape(ids.shape)
        return F.embedding(shifted, self.weight.reshape(-1, self.weight.shape[-1]))


def member_block_input(
    encoder: Encoder, members: int, inputs: torch.Tensor, key_padding: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`Encoder.block_input` for an encoder whose own parameters (a learned position table, the [CLS] vector) are
    ``[K, ...]``: member k's rows get member k's."""
    h = encoder.embed(inputs)
    d = h.shape[-1]
    if encoder.cls is not None:  # [K, 1, 1, D]: member k's vector before each of its rows
        cls = encoder.cls.expand(members, len(h) // members, 1, d).reshape(len(h), 1, d)
        h = torch.cat([cls, h], dim=1)
        if key_padding is not None:
            key_padding = torch.cat([key_padding.new_zeros(len(h), 1), key_padding], dim=1)
    if isinstance(encoder.positions, nn.Parameter):  # learned, [K, 1, n, D]
        h = (h.reshape(members, -1, h.shape[1], d) + encoder.positions[:, :, : h.shape[1]]).reshape(h.shape)
    elif encoder.positions is not None:  # the fixed table, a buffer shared by all
        h = h + encoder.positions[:, : h.shape[1]]
    return h, key_padding


MEMBER_MODULES = {nn.Linear: MemberLinear, nn.LayerNorm: MemberLayerNorm, nn.Embedding: MemberEmbedding}


def unstackable_parameter(model: nn.Module) -> str | None:
    """The first parameter a pack has no stacked form for ("name (module type)"), or None."""
    for module_name, module in model.named_modules():
        if type(module) in MEMBER_MODULES or isinstance(module, Encoder):
            continue
        for name, _ in module.named_parameters(recurse=False):
            return f"{module_name}.{name} ({type(module).__name__})"
    return None


def member_template(model: nn.Module, members: int, feed: NoiseFeed) -> nn.Module:
    """A copy of one member's ``model`` as the network of ``members`` (see the module's docstring); its
    parameters still the member's shapes until `pack_params` installs the stacked ones."""
    template = fed_template(model, feed)
    for parent in list(template.modules()):
        for name, child in list(parent.named_children()):
            if type(child) in MEMBER_MODULES:
                setattr(parent, name, MEMBER_MODULES[type(child)](child, members))
    for module in template.modules():
        if type(module) is Encoder:
            # The same module and state; its forward reads the [K, ...] tables through this block_input.
            module.block_input = functools.partial(member_block_input, module, members)
    return template
