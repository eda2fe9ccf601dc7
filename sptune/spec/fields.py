"""Building blocks of the spec models: a strict base, ranged fields, and validator problems.

Each rule sits on the model it checks. A rule raises `problem(...)`, which carries the fix to
suggest and, where the rule is about one of the model's fields, that field's name (`at`):
pydantic reports where the model sits, so `at` completes the path the user reads
(`variants.spt.search.lr` + `low`). `sptune.spec.messages` turns it into a SpecError.
"""

from __future__ import annotations

import types
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

# The pydantic error type of every rule written in this package.
SPEC_PROBLEM = "spec_problem"
POSITIVE = "use a positive number"


def no_booleans_for_numbers(cls: type[BaseModel], data: Any) -> Any:
    """Pydantic's lax mode reads true as 1: `epochs: true` would train one epoch (and blame another field)."""
    if isinstance(data, dict):
        for key, value in data.items():
            info = cls.model_fields.get(key) if isinstance(key, str) else None
            if isinstance(value, bool) and info is not None and numeric(info.annotation):
                raise problem(f"must be a number, not the boolean {str(value).lower()}",
                              "write a number (e.g. 10), or drop the field for its default", key)
    return data


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=False, validate_default=True)
    _no_booleans = model_validator(mode="before")(no_booleans_for_numbers)


def numeric(annotation: Any) -> bool:
    """Whether a field takes only numbers (int or float, or None too); a field that also takes a word (gpu: auto)
    has its own validator."""
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        return bool(args) and all(a in (int, float) for a in args)
    return annotation in (int, float)


def ranged(default: Any, fix: str, **bounds: float) -> Any:
    """A field limited by ge/gt/lt/le, with the fix its error message suggests."""
    return Field(default, json_schema_extra={"fix": fix}, **bounds)


def problem(message: str, fix: str, at: str = "") -> PydanticCustomError:
    """A rule's failure: what is wrong, how to fix it, and the field below the model it names."""
    # The message goes in as context, not as the template: braces in it are not placeholders.
    return PydanticCustomError(SPEC_PROBLEM, "{problem}", {"problem": message, "fix": fix, "at": at})
