"""Multi-head self-attention: PyTorch SDPA, or flash-attn 2 where it is the faster kernel.

Which kernel runs is one pure decision, `attention_kernel`, taken on the dtype attention will
actually compute in: q's dtype after its projection. Under `torch.autocast` that is bf16/fp16
although the LayerNorm output feeding the block stays fp32 (autocast keeps norms in fp32), so a
check on the block's input would never pick flash-attn.

SDPA comes first wherever its cuDNN backend runs the call: on an H200 at head dim 16 (batch 32,
4 heads, 1,024 tokens, bf16, forward + backward) cuDNN took 0.44 ms and flash-attn 2.61 ms
(measured by the device kit's first call). flash-attn stays the choice only where
cuDNN's attention cannot run (GPUs before Hopper, head sizes it lacks).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal, NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

try:  # optional extra `gpu`; needs CUDA to build, so it is never required
    from flash_attn import flash_attn_func as _flash_attn_func
except ImportError:  # pragma: no cover - depends on the machine
    _flash_attn_func = None

Kernel = Literal["flash", "sdpa"]
KernelChoice = Literal["auto", "sdpa", "flash"]

# flash-attn 2's documented limits (README: fp16/bf16, head dimensions up to 256, Ampere or newer).
# Its kernels are compiled for head sizes in multiples of 8; others are padded by a copy of q, k
# and v on every call, which costs more than it saves at this model size, so they go to SDPA.
FLASH_DTYPES = (torch.float16, torch.bfloat16)
FLASH_MAX_HEAD_DIM = 256
FLASH_HEAD_DIM_MULTIPLE = 8
FLASH_MIN_CAPABILITY = (8, 0)


class FlashKernel(NamedTuple):
    """A flash-attn style function, ``fn(q, k, v, dropout_p=, causal=) -> out`` on (B, N, H, D)
    tensors, and the device types it runs on (the real one: CUDA only)."""

    fn: Callable[..., torch.Tensor]
    device_types: tuple[str, ...] = ("cuda",)


def flash_installed() -> bool:
    """Whether the flash-attn package imports here (says nothing about a usable GPU)."""
    return _flash_attn_func is not None


def flash_attn_available() -> bool:
    """flash-attn imports and this process sees a CUDA GPU it supports (Ampere or newer)."""
    return (
        _flash_attn_func is not None
        and torch.cuda.is_available()
        and torch.cuda.get_device_capability() >= FLASH_MIN_CAPABILITY
    )


def default_flash_kernel() -> FlashKernel | None:
    """The real flash-attn, where it can run here."""
    return FlashKernel(_flash_attn_func) if flash_attn_available() else None


def flash_unsupported(
    q_dtype: torch.dtype,
    device_type: str,
    head_dim: int,
    has_padding_mask: bool,
    flash_installed: bool,
    flash_device_types: Sequence[str] = ("cuda",),
) -> str | None:
    """Why flash-attn cannot run this call, or None when it can.

    Causal masking and dropout are not listed: `flash_attn_func` takes both. A key-padding
    mask is: it needs the varlen API (unpadded, packed sequences), which sptune does not use.
    """
    if not flash_installed:
        return "flash-attn is not installed (or this GPU is older than Ampere)"
    if device_type not in flash_device_types:
        return f"flash-attn runs on {'/'.join(flash_device_types)}, not {device_type}"
    if q_dtype not in FLASH_DTYPES:
        return f"flash-attn needs fp16 or bf16, attention runs in {q_dtype} (use training.precision: bf16)"
    if head_dim > FLASH_MAX_HEAD_DIM or head_dim % FLASH_HEAD_DIM_MULTIPLE:
        return f"flash-attn needs a head size that is a multiple of 8 and at most 256 (got {head_dim})"
    if has_padding_mask:
        return "flash-attn's flash_attn_func takes no key-padding mask (this batch has padding)"
    return None


def attention_kernel(
    q_dtype: torch.dtype,
    device_type: str,
    head_dim: int,
    has_padding_mask: bool,
    causal: bool,
    dropout_p: float,
    flash_installed: bool,
    requested: KernelChoice = "auto",
    flash_device_types: Sequence[str] = ("cuda",),
    cudnn_sdpa: bool = False,
) -> Kernel:
    """The kernel one attention call uses ("auto"): SDPA where its cuDNN backend runs the call
    (``cudnn_sdpa``, see the module docstring), else "flash" whenever flash-attn can run it.

    ``causal`` and ``dropout_p`` are taken so the decision states every input it was asked
    about; both kernels support them, so neither changes the answer. ``requested="sdpa"``
    always gives SDPA; ``"flash"`` raises where flash-attn cannot run instead of silently
    timing or training something else.
    """
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"dropout_p must be in [0, 1), got {dropout_p}")
    if requested == "sdpa" or (requested == "auto" and cudnn_sdpa):
        return "sdpa"
    reason = flash_unsupported(q_dtype, device_type, head_dim, has_padding_mask, flash_installed, flash_device_types)
    if reason is None:
        return "flash"
    if requested == "flash":
        raise RuntimeError(f"model.attention_kernel is 'flash' but {reason}")
    return "sdpa"


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs of channels of x (..., Dh) by position-dependent angles (cos/sin broadcast to x)."""
    x1, x2 = x[..., 0::2], x[..., 1::2]
    rotated = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    return rotated.flatten(-2)


# cuDNN's fused attention (the SDPA backend PyTorch prefers on Hopper and newer): half precision, head sizes
# in multiples of 8 up to 128 (cuDNN frontend's documented limits for its SDPA graphs).
CUDNN_MIN_CAPABILITY = (9, 0)
CUDNN_MAX_HEAD_DIM = 128


def cudnn_attention_device() -> bool:
    """Whether this process's GPU runs SDPA's cuDNN backend by default (Hopper or newer, backend on)."""
    return (
        torch.cuda.is_available()
        and torch.backends.cudnn.is_available()
        and torch.backends.cuda.cudnn_sdp_enabled()
        and torch.cuda.get_device_capability() >= CUDNN_MIN_CAPABILITY
    )


def cudnn_sdpa_fits(q_dtype: torch.dtype, head_dim: int, has_padding_mask: bool) -> bool:
    """Whether SDPA's cuDNN backend takes a call of this dtype and head size (on a device where it runs).
    A padded batch goes to SDPA anyway (flash_attn_func takes no mask), so it is not asked about."""
    return (
        q_dtype in FLASH_DTYPES
        and head_dim <= CUDNN_MAX_HEAD_DIM
        and head_dim % FLASH_HEAD_DIM_MULTIPLE == 0
        and not has_padding_mask
    )


def rotary_tables(seq_len: int, head_dim: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim))
    angles = torch.outer(torch.arange(seq_len, device=device).float(), inv_freq)
    return angles.cos(), angles.sin()


def sdpa(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, key_padding: torch.Tensor | None, causal: bool, dropout_p: float
) -> torch.Tensor:
    """PyTorch SDPA on (B, N, H, D) tensors (flash-attn's layout), returning the same layout."""
    n = q.shape[1]
    mask = None
    if key_padding is not None:
        # True = may attend; padded keys are hidden from every query. A sequence that is all padding
        # would leave its queries nothing to attend to (NaN in some CUDA kernels): it sees its own
        # padding instead, which no loss or pooling reads.
        mask = (~key_padding | key_padding.all(-1, keepdim=True))[:, None, None, :]
        if causal:
            mask = mask & torch.ones(n, n, dtype=torch.bool, device=q.device).tril()
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2),
        k.transpose(1, 2),
        v.transpose(1, 2),
        attn_mask=mask,
        dropout_p=dropout_p,
        is_causal=causal and mask is None,
    )
    return out.transpose(1, 2)


class SelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, dropout: float, rotary: bool, kernel: KernelChoice = "auto") -> None:
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model {d_model} is not divisible by n_heads {n_heads}")
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.rotary = rotary
        self.dropout = dropout
        self.kernel = kernel
        # The flash-attn function this module may call (None: none), found at the first forward
        # on CUDA, not here: checking the GPU's generation initialises CUDA, and models are also
        # built in the driver (to check a given checkpoint), which must hold no CUDA context.
        self.flash: FlashKernel | None = None
        self.flash_resolved = False
        # Whether this GPU runs SDPA's cuDNN backend: found with the flash kernel, at the first CUDA forward.
        self.cudnn_device = False
        # Rotary's cos/sin tables, per (length, device): built once, not per forward.
        self.rotary_cache: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}
        # Separate query/key/value maps so variants can copy or freeze query/key alone.
        self.query = nn.Linear(d_model, d_model)
        self.key = nn.Linear(d_model, d_model)
        self.value = nn.Linear(d_model, d_model)
        self.out = nn.Linear(d_model, d_model)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        # (B, N, H, D): flash-attn's layout, a free view of the projection's output.
        b, n, _ = x.shape
        return x.view(b, n, self.n_heads, self.head_dim)

    def use_flash_kernel(self, flash: FlashKernel | None) -> None:
        """Call ``flash`` where the decision picks flash-attn (None: never). Tests put a stand-in
        here, as flash-attn cannot be built without CUDA. Not a parameter or buffer: never saved."""
        self.flash, self.flash_resolved = flash, True

    def _flash_for(self, device: torch.device) -> FlashKernel | None:
        if self.flash_resolved:
            return self.flash
        if device.type != "cuda":
            # Not resolved off CUDA (that would initialise CUDA); the decision refuses a CPU anyway.
            return FlashKernel(_flash_attn_func) if flash_installed() else None
        self.use_flash_kernel(default_flash_kernel())
        self.cudnn_device = cudnn_attention_device()
        return self.flash

    def _rotate(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotary positions applied in fp32, whatever q and k compute in: bf16 tables (8 bits of mantissa)
        lose the angle of far positions, and a rotation in bf16 rounds every product."""
        key = (q.shape[1], q.device)
        if key not in self.rotary_cache:
            self.rotary_cache[key] = tuple(t[:, None, :] for t in rotary_tables(q.shape[1], self.head_dim, q.device))
        cos, sin = self.rotary_cache[key]
        return apply_rotary(q.float(), cos, sin).to(q.dtype), apply_rotary(k.float(), cos, sin).to(k.dtype)

    def forward(self, x: torch.Tensor, key_padding: torch.Tensor | None = None, causal: bool = False) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self._heads(self.query(x)), self._heads(self.key(x)), self._heads(self.value(x))
        if self.rotary:
            q, k = self._rotate(q, k)
        # Autocast casts every projection alike; an explicit cast keeps the three in one dtype
        # for the kernel even if a caller mixes precisions (e.g. a half-precision key map).
        k, v = k.to(q.dtype), v.to(q.dtype)
        drop = self.dropout if self.training else 0.0
        flash = self._flash_for(q.device)
        cudnn = self.cudnn_device and cudnn_sdpa_fits(q.dtype, self.head_dim, key_padding is not None)
        kernel = attention_kernel(
            q.dtype,
            q.device.type,
            self.head_dim,
            key_padding is not None,
            causal,
            drop,
            flash_installed=flash is not None,
            requested=self.kernel,
            flash_device_types=flash.device_types if flash is not None else ("cuda",),
            cudnn_sdpa=cudnn,
        )
        if kernel == "flash":
            # Its backward is deterministic only when asked; training.deterministic sets PyTorch's flag.
            out = flash.fn(q, k, v, dropout_p=drop, causal=causal,
                           deterministic=torch.are_deterministic_algorithms_enabled())
        else:
            out = sdpa(q, k, v, key_padding, causal, drop)
        return self.out(out.reshape(b, n, d))
