"""The dry run's check of a plug-in model family: the kinds, options and causality it declares, and one forward of
its encoder on a tiny batch, each refusal naming the field and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from sptune.errors import SpecError
from sptune.spec import load_spec
from sptune.tasks.base import TaskInfo
from sptune.training.models.family_check import check_plugin_family, tiny_batch

DIGITS = Path(__file__).resolve().parents[3] / "search_spaces" / "digits_quick.yaml"
PIXELS = TaskInfo(name="px", input_kind="continuous", seq_len=16, num_classes=10)
TOKENS = TaskInfo(name="tok", input_kind="tokens", seq_len=12, num_classes=2, vocab_size=9)


def _check(family: str, *sets: str, info: TaskInfo = PIXELS) -> None:
    check_plugin_family(load_spec(DIGITS, [f"model.family=tests.helpers_plugins:{family}", *sets]), info)


@pytest.mark.parametrize("info", [PIXELS, TOKENS], ids=["continuous", "tokens"])
def test_a_family_that_keeps_the_contract_passes(info):
    _check("PER_POSITION", info=info)
    _check("LOOKS_AHEAD", info=info)  # bidirectional variants only: looking ahead is what they do


def test_the_tiny_batch_is_shaped_as_the_loops_feed_it():
    inputs, padding = tiny_batch(TOKENS)
    assert inputs.shape == (2, 12) and padding.dtype.is_floating_point is False and padding[-1, -1]
    inputs, padding = tiny_batch(PIXELS)
    assert inputs.shape == (2, 16, 2) and inputs.is_floating_point() and padding is None


@pytest.mark.parametrize(("family", "sets", "where", "text"), [
    ("POOLED", (), "model.family", r"returned shape \(2, 64\) on inputs \(2, 16, 2\).*\(2, 16, 64\)"),
    ("INTEGER", (), "model.family", "returned dtype torch.int64"),
    ("PER_POSITION", ("variants.spt.kind=qk_init",), "variants.spt", "variant kind 'qk_init' is not supported"),
    ("PER_POSITION", ("pretrain.objective=causal",), "variants.spt", "trains a causal model.*declares no causal"),
    ("LOOKS_AHEAD", ("pretrain.objective=causal",), "model.family", "outputs at earlier positions change"),
    ("NO_ATTENTION_NAMES", ("variants.spt.kind=qk_init",), "variants.spt", r"blocks.<i>.attn.query.\* and"),
    ("RECORDING", ("model.options.depth=2",), "model.options.depth", "has no option 'depth'"),
    ("RAISING", (), "model.family", "factory of model family .* raised ValueError: no such width"),
])  # fmt: skip
def test_a_family_breaking_the_contract_is_refused(family, sets, where, text):
    with pytest.raises(SpecError, match=text) as err:
        _check(family, *sets)
    assert err.value.where == where and err.value.fix
    assert f"tests.helpers_plugins:{family}" in err.value.problem  # names the model
