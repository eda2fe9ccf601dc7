"""A study asking for more GPUs per trial than a node has is refused before anything starts (its trials would
wait PENDING until the run timed out), as is one that trains on GPUs it did not reserve."""

from __future__ import annotations

from pathlib import Path

import pytest

from sptune.errors import SpecError
from sptune.plan.capacity import local_gpus
from sptune.preflight.gpus import check_gpu_request
from sptune.spec import load_spec
from sptune.sweep import main

SPEC = Path(__file__).resolve().parents[2] / "search_spaces" / "digits_quick.yaml"


def _spec(*overrides: str):
    return load_spec(SPEC, list(overrides))


@pytest.mark.parametrize("gpu,node_gpus", [(0, 0), (0.125, 1), (1, 1), (2, 8)])
def test_a_request_that_fits_one_node_passes(gpu, node_gpus):
    check_gpu_request(_spec(f"resources.gpu={gpu}"), node_gpus, "this machine")


def test_more_gpus_than_a_node_has_names_the_field_and_the_fix():
    with pytest.raises(SpecError) as err:
        check_gpu_request(_spec("resources.gpu=2"), 1, "the Ray cluster's largest node")
    assert err.value.where == "resources.gpu"
    assert "asks for 2 GPU per trial but the Ray cluster's largest node has 1" in err.value.problem
    assert "at most 1" in err.value.fix
    with pytest.raises(SpecError) as none:
        check_gpu_request(_spec("resources.gpu=0.25"), 0, "this machine")
    assert "this machine has no GPU" in none.value.problem and "resources.gpu: 0" in none.value.fix


def test_cuda_without_a_reserved_gpu_is_refused():
    with pytest.raises(SpecError) as err:
        check_gpu_request(_spec("training.device=cuda", "resources.gpu=0"), 8, "this machine")
    assert err.value.where == "training.device" and "resources.gpu" in err.value.fix


@pytest.mark.skipif(local_gpus() > 0, reason="refused only on a machine without a GPU")
def test_the_run_is_refused_here_before_anything_is_written(tmp_path, capsys):
    out = tmp_path / "out"
    assert main([str(SPEC), "--output", str(out), "--set", "resources.gpu=1"]) == 2
    err = capsys.readouterr().err
    # "this machine has no GPU", or where the suite's shared Ray session is up, "the Ray cluster's largest node
    # has no GPU": the same refusal, counted where Ray would place the trials.
    assert "resources.gpu: asks for 1 GPU per trial but" in err and "has no GPU" in err and "Fix:" in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not out.exists()
