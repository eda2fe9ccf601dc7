"""What a study (or a campaign of them) needs to run, all checked: `sptune.preflight.prepare` makes it,
`sptune.study.launch` runs it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sptune.plan.study_plan import StudyPlan
from sptune.spec import SweepSpec
from sptune.spec.campaign import CampaignStudy
from sptune.study.state import StudyState
from sptune.tasks.base import TaskSplits


@dataclass(frozen=True)
class TrackingTarget:
    uri: str
    experiment: str
    store_dir: Path  # where an embedded SQLite store and its artifacts live


@dataclass(frozen=True)
class ReadyStudy:
    spec_path: Path | None  # None: the spec was given as a mapping (`given_spec`)
    overrides: tuple[str, ...]
    spec: SweepSpec
    data: TaskSplits
    plan: StudyPlan
    output_dir: Path
    run_name: str  # the MLflow parent run's name
    tracking: TrackingTarget
    resume_state: StudyState | None  # the interrupted study's saved state (None: a new study)
    storage: str | None  # Tune storage path or URI; None: OUTPUT/ray_results
    spt_cache_dir: Path | None  # campaigns share SPT checkpoints between studies
    # The Optuna searches' database URL; None: OUTPUT/optuna.db. May hold a password: never shown.
    optuna_storage: str | None = field(default=None, repr=False)
    given_spec: Mapping[str, Any] | None = field(default=None, repr=False)  # the mapping given instead of a file


@dataclass(frozen=True)
class ReadyCampaign:
    name: str
    root: Path
    studies: tuple[ReadyStudy, ...]
    members: tuple[CampaignStudy, ...]
