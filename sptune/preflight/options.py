"""What the command line (or `sptune.run`) asks for, before any of it is checked."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sptune.spec.reading import read_yaml


@dataclass(frozen=True)
class RunOptions:
    spec_path: Path | None  # the spec or campaign file; None when `spec` gives its mapping instead
    overrides: tuple[str, ...] = ()
    output: Path | None = None  # None: runs/<name>-<time>
    data_dir: str | None = None  # None: $SPTUNE_DATA_DIR, else embedded/generated data only
    tracking_uri: str | None = None  # None: the spec's tracking.uri, else SQLite in the output dir
    address: str | None = None  # None: $RAY_ADDRESS, else a local Ray instance
    storage: str | None = None  # None: OUTPUT/ray_results
    resume: bool = False
    # None: $SPTUNE_OPTUNA_STORAGE, else OUTPUT/optuna.db; may hold a password: never printed (repr=False)
    optuna_storage: str | None = field(default=None, repr=False)
    # The spec (or campaign) as a mapping, given in Python with no file behind it (`sptune.run`); None: spec_path's.
    spec: Mapping[str, Any] | None = field(default=None, repr=False)

    def spec_mapping(self) -> dict[str, Any]:
        """The top-level mapping of the spec or campaign: the given one, else the file's."""
        return dict(self.spec) if self.spec is not None else read_yaml(self.spec_path)
