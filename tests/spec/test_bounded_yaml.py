"""The bounded loader reads every YAML file the project ships as yaml.safe_load does, and refuses, while composing,
what would make a walk of the document recurse without end or run for long."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from sptune.spec import bounded_yaml

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted(
    path
    for folder in ("search_spaces", "sweeps", "docs", "tools", "dashboards", "sptune")
    for pattern in ("*.yaml", "*.yml")
    for path in (REPO / folder).rglob(pattern)
)


def test_every_shipped_yaml_file_loads_as_safe_load_reads_it():
    assert len(SHIPPED) > 20
    for path in SHIPPED:
        text = path.read_text()
        assert bounded_yaml.safe_load(text) == yaml.safe_load(text), path


def test_the_campaigns_merge_keys_and_aliases_are_kept():
    text = (REPO / "sweeps" / "lra_table.yaml").read_text()
    assert "<<: *paper" in text and "*batch16" in text
    assert bounded_yaml.safe_load(text) == yaml.safe_load(text)


def test_an_alias_after_its_anchor_ends_is_accepted_and_shared_as_safe_load_shares_it():
    data = bounded_yaml.safe_load("a: &a [1, 2]\nb: *a\nc: {<<: &m {x: 1}, y: 2}\nd: {<<: *m}\n")
    assert data == {"a": [1, 2], "b": [1, 2], "c": {"x": 1, "y": 2}, "d": {"x": 1}}


@pytest.mark.parametrize("text", ["a: &a [*a]\n", "a: &a {b: [1, {c: *a}]}\n", "- &x [0, *x]\n"])
def test_an_alias_inside_its_own_anchor_is_refused(text):
    with pytest.raises(bounded_yaml.YamlBoundError, match="is inside the value its anchor"):
        bounded_yaml.safe_load(text)


def test_aliases_may_expand_to_the_cap_and_no_further():
    per_alias = 99  # a list of 98 scalars: 99 values
    base = f"a: &a [{', '.join(['1'] * (per_alias - 1))}]\n"

    def with_aliases(n: int) -> str:
        return base + "".join(f"b{i}: *a\n" for i in range(n))

    # The document: its root mapping, `a` and its list, then each b_i key and the list it repeats.
    fits = (bounded_yaml.MAX_VALUES - 2 - per_alias) // (1 + per_alias)
    assert len(bounded_yaml.safe_load(with_aliases(fits))) == fits + 1
    with pytest.raises(bounded_yaml.YamlBoundError, match="the alias \\*a makes the document expand"):
        bounded_yaml.safe_load(with_aliases(fits + 1))


def test_nesting_to_the_cap_is_accepted_and_one_level_more_is_refused():
    def nested(levels: int) -> str:
        return "[" * (levels - 1) + "1" + "]" * (levels - 1)

    assert bounded_yaml.safe_load(nested(bounded_yaml.MAX_DEPTH)) is not None
    with pytest.raises(bounded_yaml.YamlBoundError, match="nests deeper than"):
        bounded_yaml.safe_load(nested(bounded_yaml.MAX_DEPTH + 1))


def test_a_billion_laughs_and_an_oversized_file_are_refused_at_once():
    bomb = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 9)
    )
    start = time.perf_counter()
    with pytest.raises(bounded_yaml.YamlBoundError) as refused:
        bounded_yaml.safe_load(bomb)
    assert refused.value.problem_mark.line == 4  # the line of a4, whose *a3 passes the cap
    with pytest.raises(bounded_yaml.YamlBoundError, match="characters, more than"):
        bounded_yaml.safe_load("x: " + "1" * bounded_yaml.MAX_BYTES)
    assert time.perf_counter() - start < 1.0
