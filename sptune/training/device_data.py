"""Task arrays resident on the training device: one copy per process, shared by its loops.

Every epoch loop keeps its whole train/val split on the device (no per-batch host copies). A
Ray actor that is reused for trial after trial, or that pretrains and then finetunes, would
upload the same arrays again for every loop; on a GPU the copies here are made once per process
and handed to each loop (the loops only read them: batches are gathered with fresh indices).

On CPU this is a no-op: `torch.from_numpy` already shares the array's memory, so nothing is
copied and nothing is cached.

What is NOT done here: one copy per *GPU* shared by the several fractional-GPU trials (separate
processes) on it. That needs CUDA IPC (a process holding the tensors hands out IPC handles,
`torch.multiprocessing.reductions.reduce_tensor`); each trial process here holds its own copy.
"""

from __future__ import annotations

import warnings
from collections import OrderedDict

import numpy as np
import torch

# (host address, shape, strides, numpy dtype, device, torch dtype)
_Key = tuple[int, tuple[int, ...], tuple[int, ...], str, str, str]


def _key(array: np.ndarray, device: torch.device, dtype: torch.dtype | None) -> _Key:
    address = array.__array_interface__["data"][0]
    return address, array.shape, array.strides, array.dtype.str, str(device), str(dtype)


class DeviceArrays:
    """An LRU of device copies of host arrays, keyed by the memory they view.

    Keyed by address, shape, strides and dtype rather than the array object, because the same
    data reaches a process as different ndarray objects (each trial's `ray.get`, the paired
    tasks' reshaped view for pretraining). Each entry holds its host array, so that memory can
    be neither freed nor reused while the entry exists: a key never points at other data.
    (Arrays are assumed not to be written in place while training; the task arrays never are.)
    """

    def __init__(self, capacity: int = 4, device_types: tuple[str, ...] = ("cuda",)) -> None:
        # 4: a task's train and val x and y; an older task's copies go first.
        self.capacity = capacity
        self.device_types = device_types
        self._entries: OrderedDict[_Key, tuple[np.ndarray, torch.Tensor]] = OrderedDict()
        self.uploads = 0  # host-to-device copies made: how sharing between loops is seen

    def __len__(self) -> int:
        return len(self._entries)

    def tensor(self, array: np.ndarray, device: torch.device, dtype: torch.dtype | None = None) -> torch.Tensor:
        """``array`` on ``device`` (as ``dtype``): the cached copy where this device type is cached."""
        host = shared_tensor(array)
        if device.type not in self.device_types:
            return host.to(device=device, dtype=dtype)
        key = _key(array, device, dtype)
        if key in self._entries:
            self._entries.move_to_end(key)
            return self._entries[key][1]
        copy = host.to(device=device, dtype=dtype)
        self.uploads += 1
        self._entries[key] = (array, copy)
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)
        return copy

    def clear(self) -> None:
        self._entries.clear()


def shared_tensor(array: np.ndarray) -> torch.Tensor:
    """A tensor over ``array``'s memory, no copy: trials get their splits as read-only views of
    one copy per node (`TaskSplits.without_test`). Torch warns about read-only arrays; the loops
    only read a split (rows are gathered into new tensors), never write into it (test_train.py)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(array)


# The process's cache: GPUs only (see the module's docstring for CPU).
ARRAYS = DeviceArrays()


def on_device(array: np.ndarray, device: torch.device, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``array`` as a tensor on ``device``: shared memory on CPU, one cached copy per process on a GPU."""
    return ARRAYS.tensor(array, device, dtype)


def to_device_async(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A CPU tensor on ``device`` without blocking the host: a pageable copy to a GPU waits for it."""
    if device.type != "cuda":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)
