"""Rules within one section: checked on its own model, reported at the field they are about."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError

from sptune.spec.messages import spec_error
from sptune.spec.sections import (
    ModelSpec,
    PretrainSource,
    ResourcesSpec,
    SchedulerSpec,
    SearcherSpec,
    TaskSpec,
    TrainingSpec,
)


def _refused(model: type[BaseModel], data: dict) -> str:
    with pytest.raises(ValidationError) as caught:
        model.model_validate(data)
    return str(spec_error(caught.value, model))


@pytest.mark.parametrize(
    "data, expected",
    [
        ({"d_model": 0}, "d_model: must be >= 1 (got 0). Fix: use a positive number"),
        ({"d_model": 30}, "n_heads: d_model 30 is not divisible by n_heads 4"),
        ({"positions": "rotary", "d_model": 12}, "positions: rotary positions need an even head size"),
        ({"dropout": 1.0}, "dropout: must be in [0, 1) (got 1.0). Fix: use e.g. 0.1"),
        ({"family": "ssm", "ssm_state": 0}, "ssm_state: must be >= 1 (got 0)"),
        ({"attention_kernel": "flash", "d_model": 48}, "attention_kernel: flash-attn needs a head size"),
        ({"attention_kernel": "flash", "d_model": 1056}, "multiple of 8 up to 256 (got 264)"),
        ({"attention_kernel": "flash", "family": "ssm"}, "attention_kernel: an SSM has no attention"),
        ({"attention_kernel": "cudnn"}, "attention_kernel"),
    ],
)
def test_model_rules(data, expected):
    assert expected in _refused(ModelSpec, data)


def test_settings_that_are_not_used_are_not_checked():
    assert ModelSpec(ssm_state=0).family == "transformer"  # ssm_state matters only for family: ssm
    assert ModelSpec(d_model=48, attention_kernel="auto").d_model == 48  # auto falls back to SDPA instead
    assert SchedulerSpec(type="fifo", grace_period=0, reduction_factor=0.5).type == "fifo"


@pytest.mark.parametrize("halving", ["sha", "hyperband", "asha"])
def test_halving_settings(halving):
    assert "grace_period: must be >= 1 (got 0)" in _refused(SchedulerSpec, {"type": halving, "grace_period": 0})
    refused = _refused(SchedulerSpec, {"type": halving, "reduction_factor": 1})
    assert "reduction_factor: must be > 1 (got 1.0). Fix: use 2 or 3" in refused


def test_order_independent_decisions_are_the_default():
    assert SchedulerSpec().type == "sha" and SearcherSpec().mode == "batched"


def test_resources_name_the_field_that_is_wrong():
    assert "cpu: must be > 0 (got 0)" in _refused(ResourcesSpec, {"cpu": 0})
    assert "gpu: must be a share of a GPU >= 0, or auto (got -1)" in _refused(ResourcesSpec, {"gpu": -1})
    assert "max_concurrent: must be >= 1" in _refused(ResourcesSpec, {"max_concurrent": 0})
    for bad in (0, -2, True, "x", 2.5):
        assert "pack: must be a whole number of trials per pack >= 1, or auto" in _refused(ResourcesSpec, {"pack": bad})


def test_pack_defaults_to_one_and_auto_waits_for_the_whole_spec():
    # auto is resolved by the SweepSpec, which knows the model and the machine (tests/spec/test_gpu_share.py).
    assert ResourcesSpec().pack == 1 and ResourcesSpec(pack="auto").pack == "auto" and ResourcesSpec(pack=8).pack == 8


def test_pretrain_source_stage_names():
    assert PretrainSource("masked").stage_name == "pretrain"
    assert PretrainSource("causal").stage_name == "pretrain-causal"
    task = TaskSpec(name="pathfinder", gen_n=120, resolution=32)
    assert PretrainSource("masked", task).stage_name == "pretrain-on-pathfinder-gen_n120-resolution32"
    assert PretrainSource("causal") == PretrainSource("causal")  # a value, compared by its fields
    with pytest.raises(AttributeError):
        PretrainSource("masked").objective = "causal"  # frozen


def test_training_deterministic_is_a_plain_true_or_false():
    assert TrainingSpec().deterministic is False and TrainingSpec(deterministic=True).deterministic is True
    for bad in ("sometimes", 1, "on"):
        assert "deterministic: Input should be a valid boolean" in _refused(TrainingSpec, {"deterministic": bad})


def test_training_compile_is_off_static_shapes_or_cuda_graphs():
    assert TrainingSpec().compile is False
    assert TrainingSpec(compile=True).compile is True and TrainingSpec(compile="cuda_graphs").compile == "cuda_graphs"
    assert "compile: must be true, false or cuda_graphs (got 'graphs')" in _refused(TrainingSpec, {"compile": "graphs"})


def test_pack_fusion_auto_fuses_on_a_gpu_and_loops_on_a_cpu():
    assert ResourcesSpec().pack_fusion == "auto"
    assert ResourcesSpec().fuses_packs(on_gpu=True) and not ResourcesSpec().fuses_packs(on_gpu=False)
    assert ResourcesSpec(pack_fusion="fused").fuses_packs(on_gpu=False)
    assert not ResourcesSpec(pack_fusion="looped").fuses_packs(on_gpu=True)
    assert "pack_fusion" in _refused(ResourcesSpec, {"pack_fusion": "vmap"})
