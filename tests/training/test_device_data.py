"""Task arrays on the device: a no-op on CPU, one cached copy per process where caching is on,
and the same batches whether or not the loops read the cache."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sptune.tasks.base import ArraySplit, TaskInfo
from sptune.training import device_data
from sptune.training.device_data import DeviceArrays, on_device
from sptune.training.loops import FinetuneLoop, OptimConfig, PretrainLoop, PretrainObjective
from sptune.training.models import ModelConfig
from sptune.training.models.encoder import EncoderConfig

CPU = torch.device("cpu")
INFO = TaskInfo(name="px", input_kind="continuous", seq_len=16, num_classes=3, levels=17)


# Tiny models: a second thread only adds contention on a shared machine (conftest.py).
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_on_cpu_nothing_is_copied_or_cached():
    array = np.arange(12, dtype=np.uint8).reshape(3, 4)
    tensor = on_device(array, CPU)
    assert tensor.data_ptr() == array.__array_interface__["data"][0]  # the array's own memory
    assert len(device_data.ARRAYS) == 0 and device_data.ARRAYS.uploads == 0
    labels = on_device(np.array([1, 2], dtype=np.int32), CPU, torch.long)
    assert labels.dtype == torch.long and labels.tolist() == [1, 2]


def test_a_cached_device_copy_is_reused_for_any_view_of_the_same_memory():
    cache = DeviceArrays(device_types=("cpu",))  # caching switched on for CPU, to test it here
    array = np.arange(24, dtype=np.uint8).reshape(4, 6)
    first = cache.tensor(array, CPU)
    # A new ndarray over the same bytes (as each trial's ray.get gives) hits the same entry.
    assert cache.tensor(array.reshape(4, 6), CPU) is first
    # Another shape of those bytes (a paired task's view for pretraining) is another tensor.
    assert cache.tensor(array.reshape(2, 12), CPU) is not first
    # Equal values in other memory are other data.
    assert cache.tensor(array.copy(), CPU) is not first
    assert cache.tensor(array, CPU, torch.long).dtype == torch.long
    assert cache.uploads == 4 and len(cache) == 4


def test_the_oldest_copy_goes_when_the_cache_is_full():
    cache = DeviceArrays(capacity=2, device_types=("cpu",))
    a, b, c = (np.full(3, i, dtype=np.uint8) for i in range(3))
    ta = cache.tensor(a, CPU)
    cache.tensor(b, CPU)
    assert cache.tensor(a, CPU) is ta  # a is now the most recent
    cache.tensor(c, CPU)  # evicts b
    assert cache.tensor(a, CPU) is ta and cache.uploads == 3
    cache.tensor(b, CPU)
    assert cache.uploads == 4 and len(cache) == 2


def _split(n: int, seed: int) -> ArraySplit:
    rng = np.random.default_rng(seed)
    return ArraySplit(rng.integers(0, 17, (n, INFO.seq_len)).astype(np.uint8), rng.integers(0, 3, n))


TRAIN, VAL = _split(40, 0), _split(12, 1)
OPTIM = OptimConfig(lr=1e-2, batch_size=8, epochs=2, seed=5, device="cpu")
ENCODER = EncoderConfig(d_model=16, n_layers=1, n_heads=2, d_ff=32, dropout=0.1, max_len=INFO.seq_len)


def _epoch(make) -> tuple[list[torch.Tensor], dict, dict]:
    loop = make()
    gen_state = loop.generator.get_state()
    batches = [loop.train_x[loop.batches.next()].clone() for _ in range(loop.steps_per_epoch)]
    loop.generator.set_state(gen_state)
    loop.batches.restart()  # the epoch below draws the same pass again
    metrics = {k: v for k, v in loop.train_epoch().items() if k != "epoch_seconds"}
    return batches, metrics, loop.model.state_dict()


@pytest.mark.parametrize("stage", ["finetune", "pretrain"])
def test_loops_see_the_same_batches_and_train_the_same_with_the_cache(stage, monkeypatch):
    def make():
        if stage == "finetune":
            return FinetuneLoop(ModelConfig(ENCODER, num_classes=3), INFO, TRAIN, VAL, OPTIM)
        return PretrainLoop(ENCODER, PretrainObjective("masked", 0.5, "l2"), INFO, TRAIN, VAL, OPTIM)

    plain = _epoch(make)
    cache = DeviceArrays(device_types=("cpu",))
    monkeypatch.setattr(device_data, "ARRAYS", cache)  # the loops now read through a cache
    cached, again = _epoch(make), _epoch(make)
    assert cache.uploads == 4  # train/val x and y, once for both loops
    for got in (cached, again):
        assert all(torch.equal(a, b) for a, b in zip(plain[0], got[0], strict=True))
        assert got[1] == plain[1]
        assert all(torch.equal(plain[2][k], got[2][k]) for k in plain[2])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_each_array_is_uploaded_once_per_process():
    cache = DeviceArrays()
    array = np.random.default_rng(0).integers(0, 255, (64, 32), dtype=np.uint8)
    first = cache.tensor(array, torch.device("cuda"))
    again = cache.tensor(array.view(), torch.device("cuda"))
    assert first.is_cuda and again.data_ptr() == first.data_ptr() and cache.uploads == 1
    assert np.array_equal(first.cpu().numpy(), array)
