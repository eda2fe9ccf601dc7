"""A study's or campaign's name: it becomes a folder (runs/<name>-<time>, a campaign's <study>/), so it must be one
safe folder name, never a path."""

from __future__ import annotations

import re

from sptune.spec.fields import problem

MAX_NAME_LENGTH = 100
# No separator (the name would become a path), no control character, not only dots ('.', '..'), no space at an end.
_UNSAFE = re.compile(r"[/\\\x00-\x1f\x7f]")
FIX = "use one folder name without '/' or '\\', e.g. digits_quick"


def folder_name_problem(name: object) -> str | None:
    """Why ``name`` cannot be a folder name of its own (None: it can)."""
    if not isinstance(name, str):
        return f"must be a text name (got {name!r})"
    if not name:
        return "is empty"
    if len(name) > MAX_NAME_LENGTH:
        return f"is {len(name)} characters long (at most {MAX_NAME_LENGTH})"
    if _UNSAFE.search(name) or not name.strip(".") or name != name.strip():
        return (f"{name!r} is not one folder name (a separator, a control character, only dots or a space at an "
                "end would put the output elsewhere or hide it)")
    return None


def checked_folder_name(cls: type, name: str) -> str:
    """A spec's name field, refused unless it is a folder name of its own (a pydantic field validator)."""
    found = folder_name_problem(name)
    if found:
        raise problem(found, FIX)
    return name
