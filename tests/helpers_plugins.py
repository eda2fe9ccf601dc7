"""Plug-ins that break the contract (sptune.plugins), named by import path in the refusal tests, and the example
plug-in package installed into a folder of its own (never into the running environment)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

from sptune.plugins import ArraySplit, ModelFamily, TaskDef, TaskInfo, TaskSplits

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "sptune_example_plugin"


def install_example(target: Path) -> Path:
    """pip-install the example plug-in into ``target`` (offline: no dependencies, no build isolation); a
    subprocess finds its entry points with ``target`` on PYTHONPATH. Built from a copy, so setuptools' build
    folders never land in the repository."""
    source = target.parent / f"{target.name}-source"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--target",
            str(target),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    return target


class _Pooled(nn.Module):
    """Returns one vector per sequence instead of one per position: what the heads cannot read."""

    def __init__(self, d_model: int, info: TaskInfo) -> None:
        super().__init__()
        self.tokens = info.input_kind == "tokens"
        self.embed = nn.Embedding(info.vocab_size, d_model) if self.tokens else nn.Linear(2, d_model)

    def forward(self, inputs, key_padding=None, causal=False):
        return self.embed(inputs).mean(dim=1)


class _Integer(nn.Module):
    """Per-position outputs of the right shape but an integer dtype."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.d_model = d_model
        self.scale = nn.Parameter(torch.ones(1))

    def forward(self, inputs, key_padding=None, causal=False):
        return torch.zeros(*inputs.shape[:2], self.d_model, dtype=torch.int64)


class _PerPosition(nn.Module):
    """A valid encoder: one linear map per position (no mixing), so it is causal whatever it is told."""

    def __init__(self, d_model: int, info: TaskInfo) -> None:
        super().__init__()
        self.embed = nn.Embedding(info.vocab_size, d_model) if info.input_kind == "tokens" else nn.Linear(2, d_model)

    def forward(self, inputs, key_padding=None, causal=False):
        return self.embed(inputs)


class _LooksAhead(_PerPosition):
    """Adds the sequence mean to every position, even when told to be causal."""

    def forward(self, inputs, key_padding=None, causal=False):
        h = self.embed(inputs)
        return h + h.mean(dim=1, keepdim=True)


POOLED = ModelFamily("pooled", lambda m, info: _Pooled(m.d_model, info))
INTEGER = ModelFamily("integer", lambda m, info: _Integer(m.d_model))
# Declares scratch and spt only: a spec asking it for qk_init is refused.
PER_POSITION = ModelFamily("per_position", lambda m, info: _PerPosition(m.d_model, info))
# Declares an attention kind without the parameter names that kind copies.
NO_ATTENTION_NAMES = ModelFamily(
    "no_attention_names", lambda m, info: _PerPosition(m.d_model, info), kinds={"scratch", "spt", "qk_init"}
)
LOOKS_AHEAD = ModelFamily(
    "looks_ahead",
    lambda m, info: _LooksAhead(m.d_model, info),
    kinds={"scratch", "spt", "scratch_causal", "spt_causal"},
)
NOT_A_FAMILY = {"factory": "a dict is not a ModelFamily"}


def _splits(x: np.ndarray, y: np.ndarray, info: TaskInfo) -> TaskSplits:
    return TaskSplits(
        info, ArraySplit(x, y), ArraySplit(x[:20], y[:20]), lambda: ArraySplit(x[:20], y[:20]), source="a test plug-in"
    )


def _float_rows(request) -> TaskSplits:
    rng = np.random.default_rng(0)
    return _splits(
        rng.random((100, 16)).astype(np.float32), np.arange(100) % 2, TaskInfo("floats", "continuous", 16, 2)
    )


def _short_rows(request) -> TaskSplits:
    x = np.random.default_rng(0).integers(2, 6, (100, 12))
    return _splits(x, np.arange(100) % 2, TaskInfo("short", "tokens", 16, 2, vocab_size=6))


def _not_splits(request) -> dict:
    return {"train": np.zeros((10, 4))}


def _available(request) -> None:
    """Generated in memory: always available."""


FLOAT_ROWS = TaskDef("floats", "x of float dtype", {}, _float_rows, _available)
SHORT_ROWS = TaskDef("short", "rows shorter than TaskInfo.seq_len", {}, _short_rows, _available)
NOT_SPLITS = TaskDef("not_splits", "load returns a dict", {}, _not_splits, _available)


# What the recording family's factory last received: (ModelSection, TaskInfo).
RECEIVED: list[tuple] = []


def _recording(model, info) -> nn.Module:
    RECEIVED.append((model, info))
    return _PerPosition(model.d_model, info)


RECORDING = ModelFamily("recording", _recording, options={"width_scale": 1, "cell": "gru"})


def _raising(model, info) -> nn.Module:
    raise ValueError("no such width")


RAISING = ModelFamily("raising", _raising)
