"""The spec's rules across sections: every one runs, in the order that lets each read what it needs."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from sptune.errors import SpecError
from sptune.spec import cross_checks, load_spec


def test_every_cross_section_rule_runs_exactly_once():
    defined = [f for name, f in inspect.getmembers(cross_checks, inspect.isfunction)
               if name.startswith("check_") and f.__module__ == cross_checks.__name__]
    assert sorted(f.__name__ for f in cross_checks.CROSS_CHECKS) == sorted(f.__name__ for f in defined)


def test_the_budget_mode_is_checked_before_the_rules_that_read_a_variants_budget(repo_root):
    """total_matched with a given checkpoint has no pretraining budget to add: said as such, not as whatever a
    rule reading the (unknowable) budget would trip on."""
    order = [f.__name__ for f in cross_checks.CROSS_CHECKS]
    assert order.index("check_budget_mode") < min(order.index(n) for n in ("check_grace_period",
                                                                          "check_until_converged",
                                                                          "check_hyperband_budget"))
    spec = Path(repo_root) / "search_spaces" / "digits_quick.yaml"
    with pytest.raises(SpecError) as refused:
        load_spec(spec, ["budget=total_matched", "pretrain.checkpoint=/nowhere", "scheduler.grace_period=999"])
    assert "total_matched" in str(refused.value) and "grace_period" not in str(refused.value)
