"""sptune.tasks.option_rules: every task option typed and ranged, its defaults within its own rules."""

from __future__ import annotations

import pytest

from sptune.errors import SpecError
from sptune.tasks.option_rules import ROW_LIMIT, SEED, Option, check_options, check_order, implied_rule
from sptune.tasks.registry import get_task, task_names


@pytest.mark.parametrize("name", task_names())
def test_every_default_passes_its_own_rule(name):
    task = get_task(name)
    for key, default in task.defaults.items():
        assert task.rule(key).problem(default) is None, (name, key, default)


@pytest.mark.parametrize("rule, value, found", [
    (Option(int, low=1), 0, "is too small"), (Option(int, low=1), 2.5, "is not a whole number"),
    (Option(int, low=1), True, "is not a number"), (Option(int, low=1), "5", "is not a number"),
    (Option(int, low=1, divides=32), 14, "does not divide 32"), (ROW_LIMIT, None, None), (Option(int), None,
                                                                                        "may not be null"),
    (SEED, 2**32, "is too large"), (Option(bool), 1, "is not true or false"), (Option(float, low=0, high=1), 1.0, None),
])
def test_a_rule_names_what_is_wrong(rule, value, found):
    assert rule.problem(value) == found


def test_the_rule_a_default_implies():
    assert implied_rule(True) == Option(bool) and implied_rule(2000) == Option(int, low=1)
    with pytest.raises(TypeError):
        implied_rule(None)  # a None default needs a declared rule: a bug in the task module, not the user's


def test_the_refusal_names_the_option_and_what_it_accepts():
    with pytest.raises(SpecError) as caught:
        check_options("image", {"resolution": 14}, {"resolution": Option(int, low=1, divides=32)})
    assert caught.value.where == "task.resolution" and "1, 2, 4, 8, 16, 32" in caught.value.problem


def test_bounds_in_order():
    check_order({"gen_min_len": 50, "gen_max_len": 300})
    with pytest.raises(SpecError) as caught:
        check_order({"gen_min_len": 300, "gen_max_len": 300})
    assert caught.value.where == "task.gen_min_len"


@pytest.mark.parametrize("rule, value, found", [
    (Option(str, choices=("bytes", "char")), "bpe", "is not one of the allowed words"),
    (Option(str, choices=("bytes", "char")), "char", None), (Option(str), 5, "is not a text"),
    (Option(str), "label", None), (Option(str, nullable=True), None, None), (Option(object), {"parquet": []}, None),
    (Option(object), None, "may not be null"),
])  # fmt: skip
def test_text_and_structured_options(rule, value, found):
    assert rule.problem(value) == found
    assert "bytes, char" in Option(str, choices=("bytes", "char")).allowed()
