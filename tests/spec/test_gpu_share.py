"""`resources.gpu: auto`: no GPU share where the machine has none, several small-model trials per GPU where it
has some, a whole GPU for a large model (sptune.spec.gpu_share)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sptune import machine
from sptune.errors import SpecError
from sptune.spec import gpu_share, load_spec

SPECS = Path(__file__).resolve().parents[2] / "search_spaces"


def test_auto_is_no_gpu_on_a_machine_without_one(monkeypatch):
    monkeypatch.setattr(machine, "local_gpus", lambda: 0)
    assert load_spec(SPECS / "cifar_lr.yaml").resources.gpu == 0.0


def test_auto_shares_a_gpu_between_small_models_and_gives_a_large_one_a_whole_gpu(monkeypatch):
    monkeypatch.setattr(machine, "local_gpus", lambda: 1)
    assert load_spec(SPECS / "cifar_lr.yaml").resources.gpu == 1 / gpu_share.TRIALS_PER_GPU_SMALL  # d64 x 3
    assert load_spec(SPECS / "pathfinder_lr.yaml").resources.gpu == 1 / gpu_share.TRIALS_PER_GPU_SMALL  # d128 x 4
    assert load_spec(SPECS / "listops_lr.yaml").resources.gpu == 1.0  # d512 x 6
    assert load_spec(SPECS / "pathx_lr.yaml").resources.gpu == 1.0  # d128 x 4, but 16,384 pixels
    assert load_spec(SPECS / "cifar_lr.yaml", ["resources.gpu=0.5"]).resources.gpu == 0.5  # written: kept


@pytest.mark.parametrize("value", ["-1", "some", "true"])
def test_anything_but_a_share_or_auto_is_refused_naming_the_field(value):
    with pytest.raises(SpecError) as caught:
        load_spec(SPECS / "cifar_lr.yaml", [f"resources.gpu={value}"])
    assert caught.value.where == "resources.gpu" and "auto" in caught.value.fix
