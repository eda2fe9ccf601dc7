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
from sptune.training.loops import EpochLoop, FinetuneLoop, OptimConfig, PretrainLoop, PretrainObjective, _EpochSums
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
    sums = _EpochSums(loop.device)
    with loop.rng.own(), _no_host_syncs():
        loop.train_step(sums)
        loop.train_step(sums)
    return sums.means(loop.train_accuracy_key)["loss"]


def _loops(info: TaskInfo, compile_setting: bool | str = False) -> tuple[PretrainLoop, FinetuneLoop]:
    enc = EncoderConfig(d_model=64, n_layers=2, n_heads=4, d_ff=128, max_len=info.seq_len, input_kind=info.input_kind,
                        vocab_size=info.vocab_size, positions="rotary")
    train, val = _split(info, 64, 0), _split(info, 16, 1)
    cfg = OptimConfig(lr=1e-3, batch_size=16, epochs=1, device="cuda", compile=compile_setting)
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
