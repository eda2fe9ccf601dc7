"""Training steps on a CUDA GPU: SPT and finetuning on an Image-like and a padded token task run without one
read-back to the host (torch.cuda.set_sync_debug_mode("error") turns any into an error), and a trial that
reserved no GPU stays on the CPU. Skipped without CUDA."""

from __future__ import annotations

import contextlib
import io
import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from sptune.rules.budgets import variant_budget
from sptune.spec import load_spec
from sptune.tasks.base import ArraySplit, TaskInfo
from sptune.training.epoch_sums import EpochSums
from sptune.training.loops import EpochLoop, FinetuneLoop, OptimConfig, PretrainLoop, PretrainObjective
from sptune.training.model_configs import optim_config
from sptune.training.models import ModelConfig
from sptune.training.models.encoder import EncoderConfig

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

IMAGE = TaskInfo("image", "continuous", 1024, 10, levels=256)
LISTOPS = TaskInfo("listops", "tokens", 512, 10, vocab_size=20, pad_id=0, mask_id=1)


def _split(info: TaskInfo, n: int, seed: int) -> ArraySplit:
    rng = np.random.default_rng(seed)
    if info.input_kind == "continuous":
        x = rng.integers(0, info.levels, (n, info.seq_len)).astype("uint8")
    else:  # sequences of random lengths, padded at the end
        x = rng.integers(2, info.vocab_size, (n, info.seq_len)).astype("int64")
        for row, length in zip(x, rng.integers(info.seq_len // 4, info.seq_len, n), strict=True):
            row[length:] = info.pad_id
    return ArraySplit(x, rng.integers(0, info.num_classes, n))


@contextlib.contextmanager
def _no_host_syncs() -> Iterator[None]:
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(0)


def _two_steps(loop: EpochLoop) -> float:
    """Two training steps under the sync check; then (outside it) their mean loss."""
    loop.model.train()
    sums = EpochSums(loop.device)
    with loop.rng.own(), _no_host_syncs():
        loop.train_step(sums)
        loop.train_step(sums)
    return sums.means(loop.train_accuracy_key)["loss"]


def _loops(
    info: TaskInfo,
    compile_setting: bool | str = False,
    rows: int = 64,
    precision: str = "auto",
    grad_clip: float = 1.0,
    dropout: float = 0.1,
) -> tuple[PretrainLoop, FinetuneLoop]:
    enc = EncoderConfig(d_model=64, n_layers=2, n_heads=4, d_ff=128, max_len=info.seq_len, input_kind=info.input_kind,
                        vocab_size=info.vocab_size, positions="rotary", dropout=dropout)
    train, val = _split(info, rows, 0), _split(info, 16, 1)
    cfg = OptimConfig(lr=1e-3, batch_size=16, epochs=3, device="cuda", compile=compile_setting, precision=precision,
                      grad_clip=grad_clip)
    loss = "ce" if info.input_kind == "tokens" else "l2"
    pretrain = PretrainLoop(enc, PretrainObjective("masked", 0.5, loss), info, train, val, cfg)
    return pretrain, FinetuneLoop(ModelConfig(enc, num_classes=info.num_classes), info, train, val, cfg)


@pytest.mark.parametrize("info", [IMAGE, LISTOPS], ids=lambda i: i.name)
def test_spt_and_finetune_steps_never_wait_for_the_gpu(info):
    pretrain, finetune = _loops(info)
    assert pretrain.padded is (info.input_kind == "tokens")
    for loop in (pretrain, finetune):
        assert math.isfinite(_two_steps(loop))
    # A whole round afterwards (its syncs are the deliberate ones: divergence check, sums, validation).
    assert math.isfinite(pretrain.train_steps(1)["val_loss"]) and 0 <= finetune.train_steps(1)["val_acc"] <= 1


def test_a_resumed_cuda_loop_draws_the_same_masks():
    straight, _ = _loops(LISTOPS)
    assert straight.mask_generator.device.type == "cuda"  # drawn where they are used, its state checkpointed
    straight.train_steps(2)
    buffer = io.BytesIO()
    torch.save(straight.state_dict(), buffer)  # a copy: the live state keeps training
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    after = straight.train_steps(2)["loss"]
    resumed, _ = _loops(LISTOPS)
    resumed.load_state_dict(state)
    assert resumed.train_steps(2)["loss"] == pytest.approx(after, rel=1e-4)


def test_cuda_graph_steps_train_on_fixed_shape_batches():
    pretrain, finetune = _loops(IMAGE, "cuda_graphs")
    for loop in (pretrain, finetune):
        metrics = loop.train_steps(4)  # 64 rows / 16: every batch the same shape
        assert math.isfinite(metrics["loss"])


def test_a_trial_without_a_gpu_share_trains_on_the_cpu(repo_root):
    spec = load_spec(Path(repo_root) / "search_spaces" / "digits_quick.yaml", ["resources.gpu=0"])
    cfg = optim_config({"lr": 1e-3, "batch_size": 16}, spec, variant_budget(spec, "scratch"), 0.0)
    enc = EncoderConfig(d_model=16, n_layers=1, n_heads=2, d_ff=32, max_len=IMAGE.seq_len)
    loop = FinetuneLoop(ModelConfig(enc, num_classes=10), IMAGE, _split(IMAGE, 32, 0), _split(IMAGE, 8, 1), cfg)
    assert loop.device.type == "cpu" and loop.train_x.device.type == "cpu"
    assert all(p.device.type == "cpu" for p in loop.model.parameters())


# ---------------------------------------------------------------- the whole step as one CUDA graph


def _weights(loop: EpochLoop) -> dict[str, torch.Tensor]:
    return {k: v.detach().float().cpu() for k, v in loop.model.state_dict().items()}


@pytest.fixture
def deterministic_attention() -> Iterator[None]:
    """SDPA's math backend (deterministic, fp32): eager and captured steps then compute the same numbers, and a
    difference is the capture's. Dropout is off in these comparisons: whether a replayed graph's dropout follows
    the eager stream is not what they test."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.MATH):
        yield


@pytest.mark.parametrize("grad_clip", [1.0, 0.0], ids=["clipped", "unclipped"])
@pytest.mark.usefixtures("deterministic_attention")
def test_a_captured_step_trains_as_the_eager_one_and_runs_the_short_last_batch_eagerly(grad_clip):
    # 72 rows at batch 16: 4 full batches and one of 8 per epoch. Epoch 1: 3 warm-up steps, the capture's first
    # replay, the short batch eagerly; epoch 2: 4 replays and the short batch again.
    graphed = _loops(IMAGE, "cuda_graphs", rows=72, precision="fp32", grad_clip=grad_clip, dropout=0.0)
    eager = _loops(IMAGE, False, rows=72, precision="fp32", grad_clip=grad_clip, dropout=0.0)
    for g, e in zip(graphed, eager, strict=True):
        assert g.captured is not None and e.captured is None
        for _ in range(2):
            got, want = g.train_epoch(), e.train_epoch()
            for key in ("loss", "grad_norm", "lr"):
                assert got[key] == pytest.approx(want[key], rel=1e-4), key
        assert g.captured.replay_count == 5 and g.optimizer_steps == 10
        for name, tensor in _weights(e).items():
            torch.testing.assert_close(_weights(g)[name], tensor, rtol=1e-4, atol=1e-5, msg=name)


def test_replayed_steps_never_wait_for_the_gpu_and_the_lr_lives_on_it():
    pretrain, finetune = _loops(LISTOPS, "cuda_graphs")
    for loop in (pretrain, finetune):
        loop.train_steps(4)  # warm-up and capture (the capture's synchronisation is deliberate)
        assert loop.optimizer.param_groups[0]["lr"].device.type == "cuda"
        replays = loop.captured.replay_count
        assert math.isfinite(_two_steps(loop))
        assert loop.captured.replay_count == replays + 2
    assert pretrain.mask_generator.device.type == "cuda"


@pytest.mark.usefixtures("deterministic_attention")
def test_a_resumed_captured_loop_continues_as_the_uninterrupted_one():
    straight, _ = _loops(LISTOPS, "cuda_graphs", precision="fp32", dropout=0.0)
    straight.train_steps(5)
    state = torch.load(_saved(straight.state_dict()), weights_only=True)
    assert "mask_generator" in state and all(type(g["lr"]) is float for g in state["optimizer"]["param_groups"])
    after = straight.train_steps(5)["loss"]
    resumed, _ = _loops(LISTOPS, "cuda_graphs", precision="fp32", dropout=0.0)
    resumed.load_state_dict(state)
    assert resumed.train_steps(5)["loss"] == pytest.approx(after, rel=1e-4)


def _saved(state: dict) -> io.BytesIO:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return buffer


def test_a_short_batch_that_arrives_when_the_warm_up_ends_is_not_what_gets_captured():
    # 56 rows at batch 16: three full batches (the warm-up), then the short one, eagerly; the next epoch's
    # first full batch is captured, and all three replay.
    loop, _ = _loops(IMAGE, "cuda_graphs", rows=56)
    loop.train_epoch()
    assert loop.captured.graph is None
    loop.train_epoch()
    assert loop.captured.replay_count == 3 and loop.captured.static_inputs[0].shape[0] == 16
    with pytest.raises(ValueError, match="run other shapes eagerly"):
        loop.captured(loop.batch_inputs(torch.arange(8, device=loop.device)))
