"""Settings that would train one config twice with the same seed, or ask for what cannot be done, are
refused naming the field: num_samples on a grid, a grid value listed twice, a choice-only search with
several trials, grid_repeats without a grid, rerun_pretrain without re-runs or SPT."""

from __future__ import annotations

from pathlib import Path

import pytest

from sptune.errors import SpecError
from sptune.spec import SweepSpec, load_spec

BASE = Path(__file__).resolve().parents[2] / "search_spaces" / "digits_quick.yaml"
LR_GRID = "variants.spt.search.lr={type: grid, values: [1.0e-3, 3.0e-3]}"
NO_SAMPLES = "variants.spt.num_samples=null"
SCRATCH_ONLY = ("variants={scratch: {search: {lr: {type: loguniform, low: 1.0e-4, high: 1.0e-2}, "
                "batch_size: {type: choice, values: [32]}}}}")


def _spec(*overrides: str) -> SweepSpec:
    return load_spec(BASE, list(overrides))


def _refused(*overrides: str) -> SpecError:
    with pytest.raises(SpecError) as caught:
        _spec(*overrides)
    return caught.value


@pytest.mark.parametrize(
    "overrides, where, says",
    [
        ([LR_GRID], "variants.spt.num_samples", "use grid_repeats: N"),
        (["pretrain.search.lr={type: grid, values: [1.0e-3]}", "pretrain.num_samples=2"], "pretrain.num_samples",
         "does not apply to a grid search"),
        (["variants.spt.search.lr={type: grid, values: [1.0e-3, 1.0e-3]}", NO_SAMPLES],
         "variants.spt.search.lr.values[1]", "listed twice"),
        (["variants.spt.search.lr={type: choice, values: [1.0e-3, 3.0e-3]}"], "variants.spt.search.lr",
         "would train some config twice"),
        (["pretrain.search.lr={type: choice, values: [1.0e-3]}"], "pretrain.search.lr", "choice"),
        (["variants.spt.grid_repeats=2"], "variants.spt.grid_repeats", "use num_samples"),
        (["rerun_pretrain=true", "rerun_seeds=1"], "rerun_pretrain", "rerun_seeds > 1"),
        (["rerun_pretrain=true", "rerun_seeds=2", SCRATCH_ONLY, "pretrain=null"], "rerun_pretrain",
         "nothing to re-pretrain"),
        (["rerun_pretrain=true", "rerun_seeds=2", "pretrain.checkpoint=/some/state.pt"], "rerun_pretrain",
         "cannot be re-pretrained"),
        (["finetune.grid_repeats=901"], "finetune.grid_repeats", "must be in [1, 900]"),
    ],
)
def test_refused_naming_the_field(overrides, where, says):
    err = _refused(*overrides)
    assert err.where == where and says in str(err), str(err)


def test_what_is_allowed():
    # One pass over a grid, written out (as the LRA specs do), and repeats on request.
    assert _spec(LR_GRID, "variants.spt.num_samples=1").variant_repeats("spt") == 1
    assert _spec(LR_GRID, NO_SAMPLES, "variants.spt.grid_repeats=3").variant_repeats("spt") == 3
    # finetune.num_samples is the default of searches without a grid; a grid variant does not use it.
    assert _spec(LR_GRID, NO_SAMPLES, "finetune.num_samples=8").variant_samples("scratch") == 6
    # A single trial of a choice-only search trains nothing twice.
    assert _spec("variants.spt.search.lr={type: choice, values: [1.0e-3]}", "variants.spt.num_samples=1")
    assert _spec("rerun_pretrain=true", "rerun_seeds=2").rerun_pretrain
