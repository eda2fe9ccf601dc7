"""The spec file itself: a readable UTF-8 YAML file, before its contents are parsed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sptune.errors import SpecError
from sptune.spec import read_yaml

_EXAMPLE = "specs live in search_spaces/ (e.g. search_spaces/digits_quick.yaml)"


def read_spec_file(path: Path) -> dict[str, Any]:
    """The top-level mapping of a spec or campaign file; refuses directories and binary files."""
    if path.is_dir():
        raise SpecError(str(path), "this is a directory, not a spec file", f"pass a .yaml file; {_EXAMPLE}")
    if not path.is_file():
        raise SpecError(str(path), "spec file not found", f"check the path; {_EXAMPLE}")
    try:
        path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise SpecError(
            str(path),
            f"not a UTF-8 text file (byte {err.start} cannot be decoded), so not a YAML spec",
            f"pass the spec's .yaml file, not a binary or differently encoded one; {_EXAMPLE}",
        ) from None
    return read_yaml(path)
