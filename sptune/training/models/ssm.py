"""A diagonal linear state-space layer (S4D-style), the SSM family of the papers' comparisons.

Each channel runs x'(t) = A x(t) + B u(t), y = Re(C x) + D u with diagonal complex A
(S4D-Lin init: A_n = -1/2 + i*pi*n), discretised by zero-order hold with a learned step.
The whole layer is a long convolution with kernel K_l = Re(sum_n C_n Bbar_n exp(dt A_n l)),
computed in O(L log L) with FFTs. Bidirectional unless causal (then only the forward kernel).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from sptune.training.models.dropout import Dropout


class DiagonalSSM(nn.Module):
    def __init__(self, d_model: int, state_size: int = 64, dt_min: float = 1e-3, dt_max: float = 1e-1) -> None:
        super().__init__()
        half = state_size // 2  # complex conjugate pairs: half the state is enough
        log_dt = torch.rand(d_model) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min)
        self.log_dt = nn.Parameter(log_dt)
        self.log_a_real = nn.Parameter(torch.log(0.5 * torch.ones(d_model, half)))
        self.a_imag = nn.Parameter(math.pi * torch.arange(half).float().repeat(d_model, 1))
        # Two output maps: one for each direction (the backward one is unused when causal). Complex, but held as
        # its real and imaginary parts (a trailing axis of 2, as S4's own kernels hold C): fused AdamW, gradient
        # clipping's foreach norms and vmapped packs all take only real tensors.
        self.c = nn.Parameter(torch.view_as_real(torch.randn(2, d_model, half, dtype=torch.cfloat) * (0.5**0.5)))
        self.d = nn.Parameter(torch.randn(d_model))

    def kernel(self, length: int) -> torch.Tensor:
        """(2, H, L) real convolution kernels, forward and backward."""
        dt = self.log_dt.exp().unsqueeze(-1)  # (H, 1)
        a = torch.complex(-self.log_a_real.exp(), self.a_imag)  # (H, N)
        dta = dt * a
        b_bar = (dta.exp() - 1.0) / a  # zero-order hold with B = 1
        steps = torch.arange(length, device=a.device)
        powers = (dta.unsqueeze(-1) * steps).exp()  # (H, N, L)
        c = torch.view_as_complex(self.c)  # (2, H, N): a view, so its gradient reaches both real parts
        return torch.einsum("khn,hnl->khl", c * b_bar, powers).real * 2.0

    def forward(self, u: torch.Tensor, causal: bool = False) -> torch.Tensor:
        """u: (B, L, H) -> (B, L, H)."""
        length = u.shape[1]
        k = self.kernel(length).to(u.dtype)
        x = u.transpose(1, 2).float()  # (B, H, L); FFTs in fp32 for accuracy under autocast
        n = 2 * length  # zero-pad: linear, not circular, convolution
        spectrum = torch.fft.rfft(x, n=n)
        y = torch.fft.irfft(spectrum * torch.fft.rfft(k[0].float(), n=n), n=n)[..., :length]
        if not causal:
            # Backward direction: convolve the time-reversed input, reverse back, skip the lag-0 term twice.
            rev = torch.fft.rfft(x.flip(-1), n=n) * torch.fft.rfft(k[1].float(), n=n)
            y = y + torch.fft.irfft(rev, n=n)[..., :length].flip(-1) - k[1, :, :1].float() * x
        y = y + self.d.unsqueeze(-1) * x
        return y.transpose(1, 2).to(u.dtype)


class SSMMixer(nn.Module):
    """Drop-in replacement for self-attention inside a pre-LN block."""

    def __init__(self, d_model: int, state_size: int, dropout: float) -> None:
        super().__init__()
        self.ssm = DiagonalSSM(d_model, state_size)
        self.act = nn.GELU()
        self.drop = Dropout(dropout)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor, key_padding: torch.Tensor | None = None, causal: bool = False) -> torch.Tensor:
        if key_padding is not None:
            x = x.masked_fill(key_padding.unsqueeze(-1), 0.0)  # padding carries no signal into the state
        return self.out(self.drop(self.act(self.ssm(x, causal))))
