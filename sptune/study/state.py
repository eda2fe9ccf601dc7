"""study_state.json: what a study has finished, saved as each search is selected so that ``--resume``
never redoes a selected search and never re-reads the test split. JSON is the on-disk format; with a
remote --storage every save is also copied under its prefix (`sptune.storage`), so a new driver can
resume from the storage alone."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from sptune.judging.results import ResultRow
from sptune.judging.selection import Selection
from sptune.output_files import STATE
from sptune.storage import DriverFileMirror, relocated_tree


@dataclass(frozen=True)
class SelectedTrial:
    """A selected trial and epoch, with the MLflow child run of its trial."""

    selection: Selection
    mlflow_run_id: str | None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SelectedTrial:
        return cls(Selection(**data["selection"]), data["mlflow_run_id"])


@dataclass(frozen=True)
class SearchRecord:
    """What one finished search selected: its best trial, or for re-runs one trial per seed."""

    selected: list[SelectedTrial]
    # Each of its trials' best epoch score (the selection's metric; early-stopped trials at the epoch they
    # reached; None for a trial with none, e.g. failed); None in state files that predate it.
    trial_scores: list[float | None] | None = None
    # A search that ranks candidates for seed-robust selection: its best configs, best first; None otherwise.
    ranked: list[Selection] | None = None
    # A candidates stage: results.json's entry of each candidate (sptune.judging.robust_selection); None otherwise.
    candidates: list[dict[str, Any]] | None = None

    @property
    def best(self) -> SelectedTrial:
        return self.selected[0]

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SearchRecord:
        ranked = data.get("ranked")
        return cls([SelectedTrial.from_json(s) for s in data["selected"]], data.get("trial_scores"),
                   None if ranked is None else [Selection(**r) for r in ranked], data.get("candidates"))


@dataclass(frozen=True)
class TunerRun:
    """One selected stage of the study's Tuner in its timeline (`experiment`: the stage's label; from its
    release to its selection)."""

    experiment: str
    trial_variants: list[str]  # each search's SearchPlan.variant_or_objective
    start: float
    end: float
    trials: int


@dataclass
class StudyState:
    tracking_uri: str | None = None
    experiment_id: str | None = None
    parent_run_id: str | None = None
    output_dir: str | None = None  # where the driver that last ran it wrote (a resume may use another)
    searches: dict[str, SearchRecord] = field(default_factory=dict)  # by SearchPlan.label
    timeline: list[TunerRun] = field(default_factory=list)
    # pretraining label -> the campaign's cached SPT checkpoint that replaced its Tuner
    spt_from_cache: dict[str, str] = field(default_factory=dict)
    # label -> (where, problem, fix) of a search with nothing to select in the last run of the Tuner
    failed: dict[str, list[str]] = field(default_factory=dict)
    rows: list[ResultRow] | None = None  # set as soon as the test split has been read, before MLflow hears of it
    published: bool = False  # results files written and test metrics logged

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StudyState:
        rows = data.get("rows")
        return cls(
            tracking_uri=data.get("tracking_uri"),
            experiment_id=data.get("experiment_id"),
            parent_run_id=data.get("parent_run_id"),
            output_dir=data.get("output_dir"),
            searches={label: SearchRecord.from_json(r) for label, r in data.get("searches", {}).items()},
            timeline=[TunerRun(**t) for t in data.get("timeline", [])],
            spt_from_cache=dict(data.get("spt_from_cache", {})),
            failed={label: list(f) for label, f in data.get("failed", {}).items()},
            rows=None if rows is None else [ResultRow(**r) for r in rows],
            published=bool(data.get("published", False)),
        )


def read_state(output_dir: Path) -> StudyState | None:
    """The saved state of the study in ``output_dir``, or None when it holds no study. In a moved study folder
    (`sptune.storage.follow_folder_move`) its paths are read under the new folder; `output_dir` stays where the
    last driver wrote, which is how a resume learns that the folder moved."""
    path = output_dir / STATE
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    return StudyState.from_json({**relocated_tree(data), "output_dir": data.get("output_dir")})


class StateFile:
    """The study's state and the file it is saved to."""

    def __init__(self, output_dir: Path, storage: str | None = None) -> None:
        self.output_dir, self.storage = output_dir, storage
        self.state = read_state(output_dir) or StudyState()

    def save(self) -> None:
        text = json.dumps(asdict(self.state), indent=2, default=str)
        tmp = self.output_dir / (STATE + ".tmp")
        tmp.write_text(text)
        tmp.replace(self.output_dir / STATE)  # atomic: a kill never leaves half a state file
        # One object put (atomic too): the remote copy is either the last state or this one.
        DriverFileMirror(self.storage, self.output_dir).push_bytes(STATE, text.encode())
