"""A pydantic validation error becomes one SpecError: the exact field path, the problem, a fix."""

from __future__ import annotations

import pytest
from pydantic import ValidationError, model_validator

from sptune.spec import SweepSpec
from sptune.spec.fields import Strict, problem, ranged
from sptune.spec.messages import field_at, field_path, range_text, spec_error


class Inner(Strict):
    ratio: float = ranged(0.5, "use 0.5", gt=0, lt=1)

    @model_validator(mode="after")
    def _not_a_quarter(self) -> Inner:
        if self.ratio == 0.25:
            raise problem("a quarter is unlucky", "use 0.5", "ratio")
        return self


class Outer(Strict):
    inner: dict[str, Inner] = {}
    items: list[Inner] = []
    count: int | None = ranged(None, "use a positive number", ge=1)


def _error(data: dict):
    with pytest.raises(ValidationError) as caught:
        Outer.model_validate(data)
    return spec_error(caught.value, Outer)


@pytest.mark.parametrize(
    "loc, below, path",
    [
        (("variants", "spt", "search", "lr"), "low", "variants.spt.search.lr.low"),
        (("search", "lr", "values", 1), "", "search.lr.values[1]"),
        (("variants",), "spt.kind", "variants.spt.kind"),
        ((), "pretrain", "pretrain"),
        (("x",), "values[2]", "x.values[2]"),
    ],
)
def test_field_path(loc, below, path):
    assert field_path(loc, below) == path


def test_range_text():
    assert range_text({"ge": 0, "lt": 1}) == "in [0, 1)"
    assert range_text({"gt": 0, "le": 1}) == "in (0, 1]"
    assert range_text({"ge": 1}) == ">= 1" and range_text({"lt": 3}) == "< 3"


def test_field_at_walks_models_dicts_lists_and_optionals():
    assert field_at(SweepSpec, ("variants", "spt", "epochs")).json_schema_extra == {"fix": "use a positive number"}
    assert field_at(SweepSpec, ("pretrain", "mask_ratio")).metadata
    assert field_at(Outer, ("items", 0, "ratio")).default == 0.5
    assert field_at(SweepSpec, ("task", "resolution")) is None  # an extra key has no declaration


def test_a_range_error_names_the_whole_range_and_the_declared_fix():
    err = _error({"inner": {"a": {"ratio": 1}}})
    assert (err.where, err.problem, err.fix) == ("inner.a.ratio", "must be in (0, 1) (got 1)", "use 0.5")
    assert _error({"count": 0}).problem == "must be >= 1 (got 0)"


def test_a_rule_names_the_field_below_the_model_that_raised_it():
    err = _error({"items": [{"ratio": 0.5}, {"ratio": 0.25}]})
    assert (err.where, err.problem, err.fix) == ("items[1].ratio", "a quarter is unlucky", "use 0.5")


def test_the_first_problem_is_named_and_the_others_counted():
    err = _error({"count": 0, "inner": {"a": {"ratio": 2}}, "typo": 1})
    assert err.where == "inner.a.ratio" and err.problem.endswith("(2 more problems)")
    assert str(err).startswith("inner.a.ratio: must be in (0, 1) (got 2) (2 more problems). Fix: use 0.5")


def test_structural_errors_keep_their_fixes():
    assert _error({"typo": 1}).fix.startswith("remove it or check its spelling")
    assert _error({"count": "many"}).fix == "give a value of the expected type"
