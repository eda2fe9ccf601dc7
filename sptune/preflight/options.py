"""What the command line asks for, before any of it is checked."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class RunOptions:
    spec_path: Path
    overrides: tuple[str, ...] = ()
    output: Path | None = None  # None: runs/<name>-<time>
    data_dir: str | None = None  # None: $SPTUNE_DATA_DIR, else embedded/generated data only
    tracking_uri: str | None = None  # None: the spec's tracking.uri, else SQLite in the output dir
    address: str | None = None  # None: $RAY_ADDRESS, else a local Ray instance
    storage: str | None = None  # None: OUTPUT/ray_results
    resume: bool = False
    # None: $SPTUNE_OPTUNA_STORAGE, else OUTPUT/optuna.db; may hold a password: never printed (repr=False)
    optuna_storage: str | None = field(default=None, repr=False)
