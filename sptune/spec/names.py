"""A study's or campaign's name: it becomes a folder (runs/<name>-<time>, a campaign's <study>/), so it must be one
safe folder name, never a path."""

from __future__ import annotations

import re

from sptune.spec.fields import problem

MAX_NAME_LENGTH = 100
_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
FIX = "use letters, digits, '.', '_' and '-' only, starting with a letter or digit, e.g. digits_quick"


def folder_name_problem(name: object) -> str | None:
    """Why ``name`` cannot be a folder name of its own (None: it can)."""
    if not isinstance(name, str):
        return f"must be a text name (got {name!r})"
    if not name:
        return "is empty"
    if len(name) > MAX_NAME_LENGTH:
        return f"is {len(name)} characters long (at most {MAX_NAME_LENGTH})"
    if not _SAFE.fullmatch(name):
        return (f"'{name}' is not a plain folder name (a separator, a space or a leading '.' would put the output "
                "elsewhere)")
    return None


def checked_folder_name(cls: type, name: str) -> str:
    """A spec's name field, refused unless it is a folder name of its own (a pydantic field validator)."""
    found = folder_name_problem(name)
    if found:
        raise problem(found, FIX)
    return name
