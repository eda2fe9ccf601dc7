"""The attention kernel decision (flash-attn vs SDPA), and that the module follows it.

flash-attn cannot be built here (it needs CUDA), so the module tests give the dispatcher a
stand-in kernel: `reference_flash`, a plain-torch attention with flash_attn_func's signature and
(B, N, H, D) layout. It is a fake of flash-attn only; torch itself runs for real. The real
kernel is compared with SDPA in the last test, which runs wherever CUDA and flash-attn exist.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from sptune.training.models import Encoder, EncoderConfig
from sptune.training.models.attention import (
    FlashKernel,
    SelfAttention,
    apply_rotary,
    attention_kernel,
    cudnn_sdpa_fits,
    default_flash_kernel,
    flash_attn_available,
    flash_unsupported,
    rotary_tables,
)

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
HEAD_DIMS = [4, 8, 12, 16, 64, 128, 200, 256, 264, 512]


def _oracle(dtype: torch.dtype, device: str, head_dim: int, padding: bool, installed: bool) -> str:
    """flash-attn 2's documented limits, written out independently of the code under test."""
    fits = dtype in (torch.float16, torch.bfloat16) and head_dim <= 256 and head_dim % 8 == 0
    return "flash" if installed and device == "cuda" and fits and not padding else "sdpa"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_decision_over_every_combination(dtype, device):
    for head_dim, padding, causal, dropout, installed in itertools.product(
        HEAD_DIMS, [False, True], [False, True], [0.0, 0.1], [False, True]
    ):
        got = attention_kernel(dtype, device, head_dim, padding, causal, dropout, installed)
        assert got == _oracle(dtype, device, head_dim, padding, installed), (head_dim, padding, causal, dropout)


def test_the_image_config_under_autocast_runs_flash_and_its_fp32_norm_output_would_not():
    # d64 / 4 heads, bf16 projections on an H100: flash. The old check read the LayerNorm output (fp32).
    assert attention_kernel(torch.bfloat16, "cuda", 16, False, False, 0.0, True) == "flash"
    assert attention_kernel(torch.float32, "cuda", 16, False, False, 0.0, True) == "sdpa"


@pytest.mark.parametrize("causal,dropout", [(False, 0.0), (True, 0.0), (False, 0.3), (True, 0.3)])
def test_causal_and_dropout_never_rule_flash_out(causal, dropout):
    assert attention_kernel(torch.float16, "cuda", 64, False, causal, dropout, True) == "flash"


@pytest.mark.parametrize(
    "args,needle",
    [
        ((torch.bfloat16, "cuda", 16, False, False), "not installed"),
        ((torch.bfloat16, "cpu", 16, False, True), "not cpu"),
        ((torch.float32, "cuda", 16, False, True), "fp16 or bf16"),
        ((torch.bfloat16, "cuda", 12, False, True), "head size"),
        ((torch.bfloat16, "cuda", 264, False, True), "head size"),
        ((torch.bfloat16, "cuda", 16, True, True), "key-padding"),
    ],
)
def test_forcing_flash_where_it_cannot_run_says_why(args, needle):
    dtype, device, head, padding, installed = args
    assert needle in flash_unsupported(dtype, device, head, padding, installed)
    with pytest.raises(RuntimeError, match=needle):
        attention_kernel(dtype, device, head, padding, False, 0.0, installed, requested="flash")
    assert attention_kernel(dtype, device, head, padding, False, 0.0, installed, requested="sdpa") == "sdpa"


def test_requested_sdpa_wins_even_where_flash_could_run():
    assert attention_kernel(torch.bfloat16, "cuda", 16, False, False, 0.0, True, requested="sdpa") == "sdpa"
    assert attention_kernel(torch.bfloat16, "cuda", 16, False, False, 0.0, True, requested="flash") == "flash"


def test_dropout_outside_0_1_is_refused():
    with pytest.raises(ValueError, match="dropout_p"):
        attention_kernel(torch.bfloat16, "cuda", 16, False, False, 1.0, True)


# ---------------------------------------------------------------- the module follows the decision


class Recorder:
    """A stand-in for flash_attn_func (see the module docstring): reference attention in torch
    ops, recording the layout, dtype and arguments of every call."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def __call__(self, q, k, v, dropout_p=0.0, causal=False, deterministic=False):
        self.calls.append(
            {"shape": tuple(q.shape), "dtypes": {q.dtype, k.dtype, v.dtype}, "dropout_p": dropout_p, "causal": causal}
        )
        self.deterministic = deterministic
        qh, kh, vh = (t.transpose(1, 2).float() for t in (q, k, v))  # (B, H, N, D)
        scores = qh @ kh.transpose(-1, -2) / math.sqrt(q.shape[-1])
        if causal:
            n = q.shape[1]
            scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
        out = torch.nn.functional.dropout(scores.softmax(-1), dropout_p) @ vh
        return out.transpose(1, 2).to(q.dtype)  # (B, N, H, D), like flash-attn


def _pair(rotary: bool = False, dropout: float = 0.0) -> tuple[SelfAttention, SelfAttention]:
    torch.manual_seed(0)
    auto = SelfAttention(32, 4, dropout, rotary)
    sdpa = SelfAttention(32, 4, dropout, rotary, kernel="sdpa")
    sdpa.load_state_dict(auto.state_dict())
    return auto.eval(), sdpa.eval()


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("rotary", [False, True])
def test_under_cpu_autocast_the_flash_branch_gets_bf16_q_k_v_in_b_n_h_d(causal, rotary):
    auto, sdpa = _pair(rotary)
    recorder = Recorder()
    auto.use_flash_kernel(FlashKernel(recorder, ("cpu",)))  # the stand-in declares it runs on CPU
    x = torch.randn(3, 10, 32)  # fp32, like a LayerNorm's output under autocast
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got, want = auto(x, causal=causal), sdpa(x, causal=causal)
    assert recorder.calls == [{"shape": (3, 10, 4, 8), "dtypes": {torch.bfloat16}, "dropout_p": 0.0, "causal": causal}]
    assert got.dtype == want.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want.float(), atol=3e-2, rtol=3e-2)


def test_the_flash_branch_gets_attention_dropout_only_while_training():
    auto, _ = _pair(dropout=0.25)
    recorder = Recorder()
    auto.use_flash_kernel(FlashKernel(recorder, ("cpu",)))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        auto.train()(torch.randn(2, 6, 32))
        auto.eval()(torch.randn(2, 6, 32))
    assert [c["dropout_p"] for c in recorder.calls] == [0.25, 0.0]


@pytest.mark.parametrize("case", ["fp32", "padding", "cuda_only_kernel"])
def test_where_the_decision_says_sdpa_the_output_is_sdpa_s(case):
    auto, sdpa = _pair()
    recorder = Recorder()
    # "Installed" in every case; the CUDA-only kernel is what a CPU machine with flash-attn would have.
    auto.use_flash_kernel(FlashKernel(recorder, ("cuda",) if case == "cuda_only_kernel" else ("cpu",)))
    x = torch.randn(3, 10, 32)
    padding = torch.zeros(3, 10, dtype=torch.bool)
    padding[:, 7:] = True
    mask = padding if case == "padding" else None
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=case != "fp32"):
        got, want = auto(x, mask), sdpa(x, mask)
    assert recorder.calls == []
    assert torch.equal(got, want)


def test_a_model_without_a_stand_in_never_reaches_flash_on_cpu():
    torch.manual_seed(0)
    encoder = Encoder(EncoderConfig(d_model=32, n_heads=4, n_layers=2, max_len=12, dropout=0.0)).eval()
    reference = Encoder(
        EncoderConfig(d_model=32, n_heads=4, n_layers=2, max_len=12, dropout=0.0, attention_kernel="sdpa")
    ).eval()
    reference.load_state_dict(encoder.state_dict())
    x = torch.randn(2, 12, 2)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(encoder(x), reference(x))


def test_forcing_flash_on_cpu_fails_with_the_reason():
    attention = SelfAttention(32, 4, 0.0, False, kernel="flash")
    with torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(RuntimeError, match="model.attention_kernel"):
        attention(torch.randn(1, 4, 32))


def test_rotary_in_the_flash_layout_matches_rotary_per_head():
    """Rotating (B, N, H, D) with broadcast tables is the same rotation as per head (B, H, N, D)."""
    _, attention = _pair(rotary=True)
    x = torch.randn(2, 9, 32)
    heads = [m(x).view(2, 9, 4, 8).transpose(1, 2) for m in (attention.query, attention.key, attention.value)]
    cos, sin = rotary_tables(9, 8, x.device)
    q, k = apply_rotary(heads[0], cos, sin), apply_rotary(heads[1], cos, sin)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, heads[2]).transpose(1, 2).reshape(2, 9, 32)
    torch.testing.assert_close(attention(x), attention.out(want))


@pytest.mark.skipif(not flash_attn_available(), reason="needs a CUDA GPU (Ampere or newer) and flash-attn")
@pytest.mark.parametrize("causal", [False, True])
def test_real_flash_attn_matches_sdpa_on_the_gpu(causal):
    auto, sdpa = (m.cuda().train() for m in _pair(rotary=True))
    real, calls = default_flash_kernel(), []
    auto.use_flash_kernel(FlashKernel(lambda *a, **kw: calls.append(kw) or real.fn(*a, **kw)))
    x = torch.randn(4, 256, 32, device="cuda", requires_grad=True)
    outputs, grads = [], []
    for module in (auto, sdpa):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = module(x, causal=causal)
        (grad,) = torch.autograd.grad(out.float().square().sum(), x)
        outputs.append(out.float())
        grads.append(grad)
    assert calls == [{"dropout_p": 0.0, "causal": causal}]  # the real flash-attn ran, once
    torch.testing.assert_close(outputs[0], outputs[1], atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(grads[0], grads[1], atol=5e-2, rtol=5e-2)


def test_an_all_false_padding_mask_changes_nothing_and_an_all_padded_sequence_stays_finite():
    # Token tasks pass a padding mask to every batch (never asking whether any position is padded).
    torch.manual_seed(0)
    attn = SelfAttention(32, 4, 0.0, rotary=False, kernel="sdpa").eval()
    x = torch.randn(3, 10, 32)
    none_padded = torch.zeros(3, 10, dtype=torch.bool)
    for causal in (False, True):
        assert torch.allclose(attn(x, none_padded, causal), attn(x, None, causal), atol=1e-5)
    padding = none_padded.clone()
    padding[1] = True  # a sequence that is all padding
    padding[2, 6:] = True
    for causal in (False, True):
        out = attn(x, padding, causal)
        assert torch.isfinite(out).all()
        assert torch.allclose(out[2, :6], attn(x[2:, :6], None, causal)[0], atol=1e-5)  # padding stays hidden


def test_flash_attn_is_told_when_training_is_deterministic():
    # flash-attn's backward is deterministic only when asked (training.deterministic sets PyTorch's flag).
    torch.manual_seed(0)
    for enabled in (True, False):
        recorder = Recorder()
        auto = SelfAttention(32, 4, 0.0, rotary=False, kernel="auto")
        auto.use_flash_kernel(FlashKernel(recorder, ("cpu",)))
        torch.use_deterministic_algorithms(enabled)
        try:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                auto(torch.randn(2, 6, 32))
        finally:
            torch.use_deterministic_algorithms(False)
        assert recorder.deterministic is enabled


def test_rotary_positions_are_applied_in_fp32_under_bf16():
    attn = SelfAttention(64, 1, 0.0, rotary=True)
    q, k = (torch.randn(1, 1024, 1, 64).to(torch.bfloat16) for _ in range(2))
    cos, sin = (t[:, None, :] for t in rotary_tables(1024, 64, q.device))
    got_q, got_k = attn._rotate(q, k)
    assert got_q.dtype == torch.bfloat16
    # One rounding, of the fp32 result: bf16 tables or bf16 products round far positions' angles too.
    assert torch.equal(got_q, apply_rotary(q.float(), cos, sin).to(torch.bfloat16))
    assert torch.equal(got_k, apply_rotary(k.float(), cos, sin).to(torch.bfloat16))


# ---------------------------------------------------------------- cuDNN's SDPA before flash-attn


def test_where_cudnn_runs_the_call_auto_picks_sdpa_over_flash_and_forcing_flash_still_works():
    # H200, head dim 16: cuDNN 0.44 ms against flash-attn's 2.61 (the module docstring).
    assert attention_kernel(torch.bfloat16, "cuda", 16, False, False, 0.0, True, cudnn_sdpa=True) == "sdpa"
    assert attention_kernel(torch.bfloat16, "cuda", 16, False, False, 0.0, True, cudnn_sdpa=False) == "flash"
    forced = attention_kernel(torch.bfloat16, "cuda", 16, False, False, 0.0, True, requested="flash", cudnn_sdpa=True)
    assert forced == "flash"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cudnn_takes_half_precision_head_sizes_in_multiples_of_8_up_to_128_without_padding(dtype):
    for head_dim, padding in itertools.product(HEAD_DIMS, [False, True]):
        fits = dtype in (torch.float16, torch.bfloat16) and head_dim <= 128 and head_dim % 8 == 0 and not padding
        assert cudnn_sdpa_fits(dtype, head_dim, padding) is fits, (head_dim, padding)


@pytest.mark.parametrize("head_dim,reaches_flash", [(8, False), (64, False), (200, True)])
def test_a_module_on_a_cudnn_device_calls_flash_only_where_cudnn_cannot_run(head_dim, reaches_flash):
    torch.manual_seed(0)
    attention = SelfAttention(4 * head_dim, 4, 0.0, False).eval()
    recorder = Recorder()
    attention.use_flash_kernel(FlashKernel(recorder, ("cpu",)))
    attention.cudnn_device = True  # what the first CUDA forward finds on a Hopper GPU
    with torch.autocast("cpu", dtype=torch.bfloat16):
        attention(torch.randn(2, 6, 4 * head_dim))
    assert bool(recorder.calls) is reaches_flash


def test_rotary_tables_are_built_once_per_length_not_every_forward(monkeypatch):
    from sptune.training.models import attention as module

    built = []
    real = module.rotary_tables
    monkeypatch.setattr(module, "rotary_tables", lambda n, d, device: built.append(n) or real(n, d, device))
    auto, _ = _pair(rotary=True)
    x = torch.randn(2, 10, 32)
    first = auto(x)
    assert torch.equal(auto(x), first)  # the cached tables rotate exactly as fresh ones
    auto(torch.randn(2, 7, 32))
    auto(torch.randn(2, 7, 32))
    assert built == [10, 7]
