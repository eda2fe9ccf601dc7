"""Building blocks of the spec models: a strict base, ranged fields, and validator problems.

Each rule sits on the model it checks. A rule raises `problem(...)`, which carries the fix to
suggest and, where the rule is about one of the model's fields, that field's name (`at`):
pydantic reports where the model sits, so `at` completes the path the user reads
(`variants.spt.search.lr` + `low`). `sptune.spec.messages` turns it into a SpecError.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import PydanticCustomError

# The pydantic error type of every rule written in this package.
SPEC_PROBLEM = "spec_problem"
POSITIVE = "use a positive number"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=False, validate_default=True)


def ranged(default: Any, fix: str, **bounds: float) -> Any:
    """A field limited by ge/gt/lt/le, with the fix its error message suggests."""
    return Field(default, json_schema_extra={"fix": fix}, **bounds)


def problem(message: str, fix: str, at: str = "") -> PydanticCustomError:
    """A rule's failure: what is wrong, how to fix it, and the field below the model it names."""
    # The message goes in as context, not as the template: braces in it are not placeholders.
    return PydanticCustomError(SPEC_PROBLEM, "{problem}", {"problem": message, "fix": fix, "at": at})
