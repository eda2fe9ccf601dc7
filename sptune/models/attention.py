"""Multi-head self-attention: flash-attn on a GPU when installed, else PyTorch SDPA."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

try:  # optional extra `gpu`; needs CUDA to build, so it is never required
    from flash_attn import flash_attn_func as _flash_attn_func
except ImportError:  # pragma: no cover - depends on the machine
    _flash_attn_func = None


def flash_attn_available() -> bool:
    return _flash_attn_func is not None and torch.cuda.is_available()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs of channels of x (B, H, L, Dh) by position-dependent angles."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    rotated = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return rotated.flatten(-2)


def rotary_tables(seq_len: int, head_dim: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim))
    angles = torch.outer(torch.arange(seq_len, device=device).float(), inv_freq)
    return angles.cos(), angles.sin()


class SelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, dropout: float, rotary: bool) -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model {d_model} is not divisible by n_heads {n_heads}")
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.rotary = rotary
        self.dropout = dropout
        # Separate query/key/value maps so variants can copy or freeze query/key alone.
        self.query = nn.Linear(d_model, d_model)
        self.key = nn.Linear(d_model, d_model)
        self.value = nn.Linear(d_model, d_model)
        self.out = nn.Linear(d_model, d_model)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        return x.view(b, n, self.n_heads, self.head_dim).transpose(1, 2)

    def forward(self, x: torch.Tensor, key_padding: torch.Tensor | None = None, causal: bool = False) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self._heads(self.query(x)), self._heads(self.key(x)), self._heads(self.value(x))
        if self.rotary:
            cos, sin = rotary_tables(n, self.head_dim, x.device)
            q, k = apply_rotary(q, cos.to(q.dtype), sin.to(q.dtype)), apply_rotary(k, cos.to(k.dtype), sin.to(k.dtype))
        drop = self.dropout if self.training else 0.0
        if key_padding is None and self._use_flash(x):
            out = _flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), drop, causal=causal)
            out = out.reshape(b, n, d)
        else:
            mask = None
            if key_padding is not None:
                # True = may attend; padded keys are hidden from every query.
                mask = (~key_padding)[:, None, None, :]
                if causal:
                    mask = mask & torch.ones(n, n, dtype=torch.bool, device=x.device).tril()
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=drop, is_causal=causal and mask is None
            )
            out = out.transpose(1, 2).reshape(b, n, d)
        return self.out(out)

    @staticmethod
    def _use_flash(x: torch.Tensor) -> bool:
        return flash_attn_available() and x.is_cuda and x.dtype in (torch.float16, torch.bfloat16)
