"""YAML file + --set overrides -> a validated SweepSpec, or one SpecError naming the field and a fix; and back:
the spec as resolved, as YAML."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from sptune.errors import SpecError
from sptune.spec import bounded_yaml
from sptune.spec.messages import spec_error
from sptune.spec.other_files import refuse_other_kinds
from sptune.spec.sweep_spec import SweepSpec

# Keys renamed since an earlier release: old key -> new key (a spec using the old one is refused).
RENAMED_KEYS = {"seeds": "rerun_seeds"}
# A spec's and a campaign's top-level keys: a file with none of them is some other kind of YAML.
TOP_LEVEL_KEYS = {*SweepSpec.model_fields, *RENAMED_KEYS, "campaign", "studies"}


_EXAMPLE = "specs live in search_spaces/ (e.g. search_spaces/digits_quick.yaml)"


class DuplicateKeyError(yaml.constructor.ConstructorError):
    """A mapping writes the same key twice."""


def _first_duplicate(node: yaml.Node | None) -> yaml.ScalarNode | None:
    """The second writing of a key in any mapping of a composed document, where PyYAML keeps the last silently:
    `seed: 1` ... `seed: 2` would run seed 2. Merge keys (`<<: *anchor`) may be overridden, as YAML defines."""
    if isinstance(node, yaml.MappingNode):
        seen: set[tuple[str, str]] = set()
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                if (key.tag, key.value) in seen:
                    return key
                seen.add((key.tag, key.value))
            found = _first_duplicate(value)
            if found is not None:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            found = _first_duplicate(item)
            if found is not None:
                return found
    return None


def safe_load_unique(text: str) -> Any:
    """yaml.safe_load within bounded_yaml's bounds, refusing duplicate keys (found on the composed document)."""
    node = bounded_yaml.compose(text)
    duplicate = _first_duplicate(node)
    if duplicate is not None:
        raise DuplicateKeyError(None, None, f"the key '{duplicate.value}' appears twice in one mapping",
                                duplicate.start_mark)
    return bounded_yaml.construct(node)


def _where(path: Path, mark: yaml.Mark | None) -> str:
    return f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)


def read_text(path: Path) -> str:
    """A spec file's text; refuses a directory, a missing file and a file that is not UTF-8."""
    if path.is_dir():
        raise SpecError(str(path), "this is a directory, not a spec file", f"pass a .yaml file; {_EXAMPLE}")
    if not path.is_file():
        raise SpecError(str(path), "spec file not found", f"check the path; {_EXAMPLE}")
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        raise SpecError(
            str(path),
            f"not a UTF-8 text file (byte {err.start} cannot be decoded), so not a YAML spec",
            f"pass the spec's .yaml file, not a binary or differently encoded one; {_EXAMPLE}",
        ) from None


def read_yaml(path: str | Path) -> dict[str, Any]:
    """The top-level mapping of a spec or campaign file."""
    path = Path(path)
    try:
        data = safe_load_unique(read_text(path))
    except DuplicateKeyError as err:
        raise SpecError(_where(path, err.problem_mark), err.problem,
                        "keep one of the two (PyYAML would silently keep the last)") from None
    except bounded_yaml.YamlBoundError as err:
        raise SpecError(_where(path, err.problem_mark), err.problem, err.fix) from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise SpecError(_where(path, mark), f"YAML syntax error ({problem})", "fix the YAML at that line") from err
    if not isinstance(data, dict):
        raise SpecError(
            str(path), "the spec must be a YAML mapping at the top level", "start from search_spaces/digits_quick.yaml"
        )
    refuse_other_kinds(str(path), data, TOP_LEVEL_KEYS)
    return data


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Apply one ``--set a.b.c=value`` (value parsed as YAML) in place."""
    if "=" not in assignment:
        raise SpecError(f"--set {assignment}", "expected KEY.PATH=VALUE", "e.g. --set finetune.epochs=5")
    path, raw = assignment.split("=", 1)
    keys = path.strip().split(".")
    if not all(key.strip() for key in keys):
        raise SpecError(f"--set {assignment}", f"'{path}' is not a field path (an empty name before '=' or "
                        "between dots)", "e.g. --set finetune.epochs=5")
    try:
        value = bounded_yaml.safe_load(raw)
    except bounded_yaml.YamlBoundError as err:
        raise SpecError(f"--set {path}", f"value '{raw[:80]}': {err.problem}", err.fix) from None
    except yaml.YAMLError as err:
        raise SpecError(
            f"--set {path}", f"value '{raw}' is not valid YAML", "quote strings, e.g. '[1e-4, 1e-3]'"
        ) from err
    node = data
    for i, key in enumerate(keys[:-1]):
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        if not isinstance(child, dict):
            raise SpecError(f"--set {path}", f"'{'.'.join(keys[: i + 1])}' is not a mapping", "set a leaf field")
        node = child
    node[keys[-1]] = value


def _refuse_renamed(data: dict[str, Any]) -> None:
    for old, new in RENAMED_KEYS.items():
        if old in data:
            raise SpecError(old, f"'{old}' was renamed to '{new}'", f"write {new}: {data[old]!r} instead")


def from_dict(data: dict[str, Any]) -> SweepSpec:
    _refuse_renamed(data)
    try:
        return SweepSpec.model_validate(data)
    except ValidationError as err:
        raise spec_error(err, SweepSpec) from None


def spec_from_mapping(data: Mapping[str, Any], overrides: Sequence[str] = ()) -> SweepSpec:
    """A spec's mapping (a YAML file's, or one given in Python) with ``--set`` overrides applied to a copy."""
    data = copy.deepcopy(dict(data))
    for assignment in overrides:
        apply_override(data, assignment)
    return from_dict(data)


def load_spec(path: str | Path, overrides: list[str] | None = None) -> SweepSpec:
    return spec_from_mapping(read_yaml(path), overrides or ())


def resolved_spec_text(spec: SweepSpec) -> str:
    """The spec as resolved (defaults and overrides applied): saved as OUTPUT/spec.yaml, and
    compared on --resume so a study is never continued under a different spec."""
    return yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False)
