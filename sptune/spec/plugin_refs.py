"""How a spec names a plug-in, and finding it: by Python entry point (an installed package's metadata) or by an
import path in the spec.

Torch-free: a spec names a plug-in by an entry-point name (``task: {name: majority}``) or by ``module:attr``, the
entry points' own convention (``task: {name: my_pkg.tasks:MY_TASK}``); listing the installed plug-ins reads package
metadata only and imports nothing. The contract the objects found must honour is `sptune.plugins`.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from pydantic_core import PydanticCustomError

from sptune.errors import SpecError
from sptune.spec.fields import problem

TASK_GROUP = "sptune.tasks"
MODEL_GROUP = "sptune.models"
GUIDE = "docs/guides/plugins.md"


@dataclass(frozen=True)
class Found:
    """A plug-in object and where it came from (shown by `sptune.data info` and the dry run)."""

    value: Any
    origin: str


def is_import_path(ref: str) -> bool:
    """``module:attr`` (an import path) rather than a registered name."""
    return ":" in ref


def installed(group: str) -> dict[str, EntryPoint]:
    """The entry points of ``group`` in every installed distribution (sys.path, PYTHONPATH included), by name."""
    return {ep.name: ep for ep in entry_points(group=group)}


def entry_point_origin(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    package = f" of {dist.name} {dist.version}" if dist is not None else ""
    return f"entry point {ep.group}:{ep.name} = {ep.value}{package}"


def origin(ref: str, group: str) -> str:
    """Where a plug-in a spec names comes from, without importing it."""
    if is_import_path(ref):
        return f"import path {ref}"
    ep = installed(group).get(ref)
    return entry_point_origin(ep) if ep is not None else "unknown"


def _imported(module: str, ref: str, field: str) -> Any:
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        missing = err.name or module
        raise SpecError(
            field,
            f"'{ref}' names module '{module}', which does not import (no module named "
            f"'{missing}' on this Python's path)",
            f"install the package that holds it (pip install ...), or put its folder on PYTHONPATH; "
            f"the form is package.module:attribute (see {GUIDE})",
        ) from None
    except Exception as err:  # noqa: BLE001 - the plug-in's own code failed: name it, the user fixes it
        raise SpecError(
            field,
            f"importing module '{module}' (from '{ref}') raised {type(err).__name__}: {err}",
            f"fix that module (python -c 'import {module}' shows the traceback)",
        ) from None


def load_reference(ref: str, field: str) -> Found:
    """The object an import path ``module:attr`` names (``attr`` may be dotted)."""
    module, _, attr = ref.partition(":")
    if not module or not attr:
        raise SpecError(
            field,
            f"'{ref}' is not an import path of the form module:attribute",
            "write e.g. my_pkg.models:GRU (a module, a colon, the object in it)",
        )
    value: Any = _imported(module, ref, field)
    for part in attr.split("."):
        if not hasattr(value, part):
            raise SpecError(
                field,
                f"module '{module}' has no attribute '{attr}' (from '{ref}')",
                f"name an object the module defines, e.g. {module}:{_example(value)}",
            )
        value = getattr(value, part)
    return Found(value, f"import path {ref}")


def _example(module: Any) -> str:
    public = [name for name in dir(module) if not name.startswith("_") and name.isupper()]
    return public[0] if public else "NAME"


def load_entry_point(ep: EntryPoint, field: str) -> Found:
    try:
        value = ep.load()
    except Exception as err:  # noqa: BLE001 - an installed plug-in that fails to import: name it
        raise SpecError(
            field,
            f"{entry_point_origin(ep)} fails to load: {type(err).__name__}: {err}",
            f"fix or reinstall that package, or uninstall it (pip uninstall {_dist(ep)})",
        ) from None
    return Found(value, entry_point_origin(ep))


def _dist(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return dist.name if dist is not None else "PACKAGE"


def find(ref: str, group: str, field: str) -> Found | None:
    """The plug-in a spec names: an import path, or an installed entry point of ``group``; None if neither."""
    if is_import_path(ref):
        return load_reference(ref, field)
    ep = installed(group).get(ref)
    return load_entry_point(ep, field) if ep is not None else None


def expect(found: Found, kind: type, ref: str, field: str) -> Any:
    """The found object, which must be a ``kind`` (a TaskDef, a ModelFamily)."""
    if not isinstance(found.value, kind):
        raise SpecError(
            field,
            f"'{ref}' ({found.origin}) is a {type(found.value).__name__}, not a sptune.plugins.{kind.__name__}",
            f"point it at a sptune.plugins.{kind.__name__} object (see {GUIDE})",
        )
    return found.value


# The families sptune ships; any other model.family names a plug-in (sptune.training.models.families).
BUILT_IN_FAMILIES = ("transformer", "ssm")


def family_problem(family: str, options: dict, pooling: str, attention_kernel: str) -> PydanticCustomError | None:
    """The model section's family against what exists (built-in, an import path the dry run resolves, or an
    installed entry point: package metadata only, so the spec stays torch-free) and the fields it fits."""
    if family in BUILT_IN_FAMILIES:
        if options:
            return problem(
                f"the built-in family '{family}' takes no options (its settings are model's own fields: "
                "d_model, n_layers, n_heads ...)",
                "drop model.options",
                "options",
            )
        return None
    found = sorted(installed(MODEL_GROUP))
    if not is_import_path(family) and family not in found:
        names = ", ".join([*BUILT_IN_FAMILIES, *found])
        return problem(
            f"unknown model family '{family}'",
            f"use one of: {names}; or a plug-in's import path module:attribute (see {GUIDE})",
            "family",
        )
    # A plug-in builds its own encoder, so sptune's [CLS] vector and attention kernels are not in it.
    if pooling == "cls":
        return problem(
            f"cls pooling reads a [CLS] position that only the built-in families prepend; '{family}' is a plug-in",
            "use pooling: mean, max or last",
            "pooling",
        )
    if attention_kernel == "flash":
        return problem(
            f"'{family}' is a plug-in: it builds its own encoder, with no sptune attention kernel to choose",
            "use attention_kernel: auto",
            "attention_kernel",
        )
    return None
