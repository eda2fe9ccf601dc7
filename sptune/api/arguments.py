"""What `sptune.run` and `sptune.plan` take: a spec (a path, a mapping or a `SweepSpec`) and the command line's
options as keywords, turned into the `RunOptions` the preflight checks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from sptune.errors import SpecError
from sptune.preflight import RunOptions
from sptune.spec import SweepSpec
from sptune.spec.campaign import assignments

# A spec or campaign file's path; its mapping (what the YAML would hold); or a validated spec.
SpecLike = str | Path | Mapping[str, Any] | SweepSpec
# `--set` overrides: "KEY.PATH=VALUE" strings, or a mapping of field paths to values.
Overrides = Sequence[str] | Mapping[str, Any]


def run_options(
    spec: SpecLike,
    overrides: Overrides = (),
    output: str | Path | None = None,
    data_dir: str | Path | None = None,
    tracking_uri: str | None = None,
    address: str | None = None,
    storage: str | None = None,
    optuna_storage: str | None = None,
    resume: bool = False,
) -> RunOptions:
    """The preflight's options for a spec and the command line's flags (each keyword is the flag of the same name,
    with its default)."""
    path, mapping = _spec_source(spec)
    return RunOptions(
        spec_path=path,
        overrides=_overrides(overrides),
        output=None if output is None else Path(output),
        data_dir=None if data_dir is None else str(data_dir),
        tracking_uri=tracking_uri,
        address=address,
        storage=storage,
        resume=resume,
        optuna_storage=optuna_storage,
        spec=mapping,
    )


def _spec_source(spec: SpecLike) -> tuple[Path | None, dict[str, Any] | None]:
    if isinstance(spec, (str, Path)):
        return Path(spec), None
    if isinstance(spec, SweepSpec):
        # What was set (defaults left to the spec): validated again, it resolves to the same spec.yaml.
        return None, spec.model_dump(mode="json", exclude_unset=True)
    if isinstance(spec, Mapping):
        mapping = dict(spec)
        try:
            yaml.safe_dump(mapping)  # the study logs the mapping as given; MLflow keeps it as YAML
        except yaml.YAMLError as err:
            raise SpecError(
                "spec",
                f"the mapping holds a value YAML cannot represent ({str(err).splitlines()[0]})",
                "use plain str, int, float, bool, list and dict values, as a YAML file holds",
            ) from None
        return None, mapping
    raise SpecError("spec", f"is a {type(spec).__name__}", "pass a spec file's path, a mapping or a SweepSpec")


def _overrides(overrides: Overrides) -> tuple[str, ...]:
    if isinstance(overrides, Mapping):
        return tuple(assignments(overrides))
    if isinstance(overrides, str):
        raise SpecError(
            "overrides", f"is one string ({overrides!r}), not a list of them", f"pass overrides=[{overrides!r}]"
        )
    return tuple(overrides)
