"""Pydantic's first validation error -> one SpecError naming the field path and a fix."""

from __future__ import annotations

import types
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from sptune.errors import SpecError
from sptune.spec.fields import SPEC_PROBLEM

_FIX_BY_TYPE = {
    "extra_forbidden": "remove it or check its spelling against search_spaces/digits_quick.yaml",
    "missing": "add this field",
    "literal_error": "use one of the allowed values",
}
_BOUND_SIGNS = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<"}
_BOUND_TYPES = {"greater_than_equal", "greater_than", "less_than_equal", "less_than"}


def spec_error(err: ValidationError, model: type[BaseModel]) -> SpecError:
    """The first problem in field order; the count of the others is appended."""
    errors = err.errors()
    where, problem, fix = _describe(errors[0], model)
    more = f" ({len(errors) - 1} more problems)" if len(errors) > 1 else ""
    return SpecError(where, problem + more, fix)


def _describe(error: dict[str, Any], model: type[BaseModel]) -> tuple[str, str, str]:
    """(where, problem, fix) for one pydantic error."""
    if error["type"] == SPEC_PROBLEM:
        ctx = error["ctx"]
        return field_path(error["loc"], ctx["at"]), ctx["problem"], ctx["fix"]
    path = field_path(error["loc"])
    if error["type"] in _BOUND_TYPES:
        return path, *_out_of_range(error, field_at(model, error["loc"]))
    if error["type"] == "extra_forbidden":
        return path, "unknown key", _FIX_BY_TYPE["extra_forbidden"]
    problem = f"{error['msg']} (got {error.get('input')!r})"
    return path, problem, _FIX_BY_TYPE.get(error["type"], "give a value of the expected type")


def _out_of_range(error: dict[str, Any], info: FieldInfo | None) -> tuple[str, str]:
    # The field's declaration gives the whole range (pydantic reports the one bound crossed) and the fix.
    allowed = range_text(_bounds(info) if info else error["ctx"])
    fix = (info.json_schema_extra or {}).get("fix") if info else None
    return f"must be {allowed} (got {error['input']!r})", fix or f"use a number {allowed}"


def field_path(loc: tuple[str | int, ...], below: str = "") -> str:
    """('variants', 'spt', 'search', 'lr') + 'low' -> 'variants.spt.search.lr.low'; list items as [i]."""
    path = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in loc).removeprefix(".")
    return f"{path}.{below}" if path and below else path or below


def range_text(bounds: dict[str, Any]) -> str:
    """{'ge': 0, 'lt': 1} -> 'in [0, 1)'; {'ge': 1} -> '>= 1'."""
    low = next(((k, v) for k, v in bounds.items() if k in ("ge", "gt")), None)
    high = next(((k, v) for k, v in bounds.items() if k in ("le", "lt")), None)
    if low and high:
        return f"in {'[' if low[0] == 'ge' else '('}{low[1]}, {high[1]}{']' if high[0] == 'le' else ')'}"
    kind, value = low or high
    return f"{_BOUND_SIGNS[kind]} {value}"


def _bounds(info: FieldInfo) -> dict[str, Any]:
    return {name: getattr(m, name) for m in info.metadata for name in _BOUND_SIGNS if hasattr(m, name)}


def field_at(model: type[BaseModel], loc: tuple[str | int, ...]) -> FieldInfo | None:
    """The declaration of the field at `loc` (through nested models, dicts, lists and Optionals)."""
    annotation: Any = model
    info = None
    for part in loc:
        annotation = _without_none(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            info = annotation.model_fields.get(str(part))
            if info is None:
                return None
            annotation = info.annotation
        elif get_origin(annotation) in (dict, list):
            annotation, info = get_args(annotation)[-1], None  # a key or an index: step into the values
        else:
            return None
    return info


def _without_none(annotation: Any) -> Any:
    if get_origin(annotation) in (Union, types.UnionType):
        inner = [a for a in get_args(annotation) if a is not type(None)]
        return inner[0] if len(inner) == 1 else annotation
    return annotation
