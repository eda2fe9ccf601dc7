"""Search spaces refuse what they cannot search, naming the field inside the space and a fix."""

from __future__ import annotations

import re

import pytest
from pydantic import TypeAdapter, ValidationError

from sptune.spec import BatchSizeSpace, LrSpace, SearchSpec
from sptune.spec.messages import spec_error

LR = {"type": "loguniform", "low": 1e-4, "high": 1e-2}
BATCH = {"type": "choice", "values": [32, 64]}


def _refused(space: dict, lr: bool = True) -> str:
    data = {"lr": space, "batch_size": BATCH} if lr else {"lr": LR, "batch_size": space}
    with pytest.raises(ValidationError) as caught:
        SearchSpec.model_validate(data)
    return str(spec_error(caught.value, SearchSpec))


@pytest.mark.parametrize(
    "space, expected",
    [
        ({"type": "loguniform", "low": 0, "high": 1}, "lr.low: must be > 0 for a log-uniform range"),
        ({"type": "uniform", "low": -1, "high": 1}, "lr.low: lr must be > 0 (got -1.0). Fix: use a positive lr"),
        ({"type": "loguniform", "low": 1e-2, "high": 1e-4}, "lr.low: low 0.01 is not below high 0.0001"),
        ({"type": "loguniform", "low": 1e-4}, "lr.high: a loguniform range needs 'high'"),
        ({"type": "uniform", "low": 1, "high": 2, "values": [1]}, "lr.values: a uniform range takes low/high"),
        ({"type": "grid", "values": []}, "lr.values: empty list of values"),
        ({"type": "choice"}, "lr.values: empty list of values"),
        ({"type": "choice", "values": [1e-3], "high": 1}, "lr.high: a choice takes values, not low/high"),
        ({"type": "grid", "values": [1e-3, 0]}, "lr.values[1]: lr must be > 0 (got 0.0)"),
        ({"type": "grid", "values": [1e-3, "x"]}, "lr.values[1]: Input should be a valid number"),
        ({"type": "sobol"}, "lr.type: Input should be"),
    ],
)
def test_lr_space_refusals(space, expected):
    assert expected in _refused(space)


@pytest.mark.parametrize(
    "space, expected",
    [
        ({"type": "choice", "values": [32, 12.5]}, "batch_size.values[1]: batch_size must be an integer (got 12.5)"),
        ({"type": "grid", "values": [32, 0]}, "batch_size.values[1]: batch_size must be > 0"),
        ({"type": "loguniform", "low": 16, "high": 64}, "batch_size.type: batch_size needs a discrete list"),
        ({"type": "uniform", "low": 1.5, "high": 64}, "batch_size.low: batch_size must be an integer"),
    ],
)
def test_batch_size_space_refusals(space, expected):
    assert expected in _refused(space, lr=False)


def test_accepted_spaces_keep_their_values():
    search = SearchSpec.model_validate({"lr": {"type": "grid", "values": [1e-3, 1e-2]}, "batch_size": BATCH})
    # Each field carries its own quantity's rule: the same list is refused as a batch size, kept as an lr.
    assert search.lr.values == [1e-3, 1e-2] and _refused({"type": "grid", "values": [0.5]}, lr=False)
    assert search.has_grid() and search.grid_size() == 2
    assert [name for name, _ in search.items()] == ["lr", "batch_size"]
    assert TypeAdapter(BatchSizeSpace).validate_python({"type": "grid", "values": [16.0, 32]}).values == [16.0, 32.0]


def test_candidates_are_the_values_or_the_range_ends():
    assert TypeAdapter(LrSpace).validate_python(LR).candidates() == [1e-4, 1e-2]
    assert TypeAdapter(BatchSizeSpace).validate_python(BATCH).candidates() == [32.0, 64.0]


def test_weight_decay_warmup_and_dropout_can_be_searched_per_variant():
    space = SearchSpec.model_validate({
        "lr": {"type": "loguniform", "low": 1e-4, "high": 1e-2},
        "batch_size": {"type": "choice", "values": [32]},
        "weight_decay": {"type": "grid", "values": [0, 0.1]},
        "warmup_fraction": {"type": "uniform", "low": 0.0, "high": 0.3},
        "dropout": {"type": "choice", "values": [0.0, 0.1]},
    })
    assert [name for name, _ in space.items()] == ["lr", "batch_size", "weight_decay", "warmup_fraction", "dropout"]
    assert space.grid_size() == 2


@pytest.mark.parametrize("field,values,needle", [
    ("weight_decay", [-0.1], "weight_decay must be >= 0"),
    ("dropout", [1.0], "must be in [0, 1)"),
])
def test_searched_regularisers_are_refused_out_of_range(field, values, needle):
    with pytest.raises(ValidationError, match=re.escape(needle)):
        SearchSpec.model_validate({"lr": {"type": "choice", "values": [1e-3]},
                                   "batch_size": {"type": "choice", "values": [32]},
                                   field: {"type": "grid", "values": values}})
