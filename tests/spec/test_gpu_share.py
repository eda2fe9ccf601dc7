"""`resources.gpu: auto` and `resources.pack: auto`: no GPU share and no packs where the machine has no GPU;
where it has some, small models packed 8 to a pack, two packs to a GPU (or 8 unpacked trials to a GPU), and a
large model a whole GPU, unpacked (sptune.spec.gpu_share)."""

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


def test_auto_packs_nothing_on_a_machine_without_a_gpu(monkeypatch):
    monkeypatch.setattr(machine, "local_gpus", lambda: 0)
    spec = load_spec(SPECS / "cifar_lr.yaml", ["resources.pack=auto"])
    assert (spec.resources.pack, spec.resources.gpu) == (1, 0.0)


def test_auto_packs_a_small_model_on_a_gpu_two_packs_to_the_gpu(monkeypatch):
    monkeypatch.setattr(machine, "local_gpus", lambda: 1)
    spec = load_spec(SPECS / "cifar_lr.yaml", ["resources.pack=auto"])
    assert spec.resources.pack == gpu_share.MEMBERS_PER_PACK_SMALL == 8
    assert spec.resources.gpu == 1 / gpu_share.PACKS_PER_GPU
    large = load_spec(SPECS / "listops_lr.yaml", ["resources.pack=auto"])  # d512 x 6: a whole GPU, unpacked
    assert (large.resources.pack, large.resources.gpu) == (1, 1.0)
    given = load_spec(SPECS / "cifar_lr.yaml", ["resources.pack=4"])  # a written pack is one trial to gpu: auto
    assert (given.resources.pack, given.resources.gpu) == (4, 1 / gpu_share.PACKS_PER_GPU)


@pytest.mark.parametrize(
    "setting",
    ["model.attention_dropout=0.1", "training.compile=true", "resources.max_concurrent=4", "training.device=cpu",
     "scheduler.type=hyperband"],
)
def test_auto_packs_nothing_where_the_spec_would_refuse_a_pack(monkeypatch, setting):
    # auto never makes a spec refused: the same setting with a written pack of 8 is (tests/spec/test_sweep_spec.py).
    monkeypatch.setattr(machine, "local_gpus", lambda: 1)
    spec = load_spec(SPECS / "cifar_lr.yaml", ["resources.pack=auto", setting])
    assert (spec.resources.pack, spec.resources.gpu) == (1, 1 / gpu_share.TRIALS_PER_GPU_SMALL)


@pytest.mark.parametrize("value", ["-1", "some", "true"])
def test_anything_but_a_share_or_auto_is_refused_naming_the_field(value):
    with pytest.raises(SpecError) as caught:
        load_spec(SPECS / "cifar_lr.yaml", [f"resources.gpu={value}"])
    assert caught.value.where == "resources.gpu" and "auto" in caught.value.fix
