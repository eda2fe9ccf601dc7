"""tools/spec_reference.py: docs/reference/spec.md is what the spec's models render to, and each field's row says
what its comments say."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from sptune.spec.sweep_spec import SweepSpec

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
import spec_reference  # noqa: E402


class Inner(BaseModel):
    """A nested section.

    depth: how deep it goes
    """

    depth: int = Field(3, ge=1)


class Outer(BaseModel):
    # Where it runs: a comment above the field
    # on two lines.
    where: Literal["here", "there"] = "here"
    size: float | None = None  # a closing comment
    inner: Inner = Field(default_factory=Inner)
    named: dict[str, Inner] = {}
    described: int = Field(0, description="the description wins")  # not this comment


def test_the_committed_page_is_what_the_spec_renders():
    page = spec_reference.PAGE
    assert page.is_file() and page.read_text() == spec_reference.render(), (
        "docs/reference/spec.md is stale (a spec field or its comment changed): regenerate it with "
        f"`{spec_reference.COMMAND}` (or `python tools/spec_reference.py && python tools/cli_reference.py` for both)"
    )


def test_a_fields_row_carries_its_type_range_default_and_comments():
    table = spec_reference.render_section("outer", Outer)
    assert "| `where` | `here` \\| `there` | `here` | Where it runs: a comment above the field on two lines. |" in table
    assert "| `size` | float \\| `null` | `null` | a closing comment |" in table
    assert "| `inner` | [Inner](#inner) | its section's defaults | its own section, below |" in table
    assert "| `described` | int | `0` | the description wins |" in table
    inner = spec_reference.render_section("outer.inner", Inner)
    assert "A nested section." in inner and "| `depth` | int (≥ 1) | `3` | how deep it goes |" in inner


def test_every_section_of_the_spec_is_reached_once():
    paths = dict((cls, path) for path, cls in spec_reference.sections(SweepSpec))
    assert len(paths) == len(spec_reference.sections(SweepSpec))
    names = {cls.__name__: path for cls, path in paths.items()}
    assert names["ModelSpec"] == "model" and names["VariantSpec"] == "variants.<name>"
    assert names["ParamSpace"].endswith("search.lr")
    assert spec_reference.sections(Outer)[1:] == [("inner", Inner)]


def test_every_shipped_task_lists_its_options():
    text = spec_reference.render_tasks()
    assert "### `digits`" in text and "### `listops`" in text
    assert "| `train_fraction` | a number in (0, 1] | `1.0` |" in text
