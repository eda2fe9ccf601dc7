"""Tune's experiment snapshot kept whole, so a resume restores trials and searchers of one instant.

Tune writes each snapshot into a staging folder on the driver: the trial list
(``experiment_state-S.json``), every stage's searcher (``searcher-state-S.pkl``) and its trial
counter (``search_gen_state-S.json``), S naming the driver's session. A background thread then copies
that folder to STORAGE/study one file at a time, while the next snapshot may already be rewriting it.
A driver killed during a copy leaves files of different snapshots under the storage, and
``Tuner.restore`` takes them as they are (CI hit the first case; the second follows from the same copy):

- searchers newer than the trial list wait for a trial the list lacks, so their stage is never selected;
- a trial list newer than the searchers holds trials no searcher suggested, which then run
  unaccounted while the searcher suggests their slots again.

`SnapshotBundle` zips the three files of every snapshot in the driver step that wrote them and writes
the zip atomically to STORAGE/study/sptune_snapshot.zip; `restore_consistent` writes them back before
``Tuner.restore`` reads the storage. Under a remote storage with the default Optuna database the zip
also holds a SQLite backup of the database from the same step, which a resume from the storage alone
starts from.
"""

from __future__ import annotations

import io
import sqlite3
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from ray import tune

from sptune import storage as stored
from sptune.output_files import OPTUNA_DB
from sptune.study.this_run import THIS_RUN

BUNDLE = "sptune_snapshot.zip"
# Tune's file name templates (TuneController, SearchGenerator, Searcher), S being the session.
TUNE_STATE = ("experiment_state-{}.json", "search_gen_state-{}.json", "searcher-state-{}.pkl")


class SnapshotBundle(tune.Callback):
    """Writes every experiment snapshot of the study's Tuner as one atomic zip under its storage folder.
    Tune asks each callback for its state at the end of the same driver step that saved the trial list
    and the searchers, with nothing run in between: the files in the staging folder are that snapshot's."""

    def __init__(self, experiment_uri: str, optuna_db: Path | None = None) -> None:
        self.experiment_uri, self.optuna_db = experiment_uri, optuna_db
        self.staging: Path | None = None
        self.written = 0  # bundles written by this driver (CheckpointPruner keeps what the last one names)

    def __getstate__(self) -> dict:
        return {"experiment_uri": self.experiment_uri, "optuna_db": self.optuna_db}

    def __setstate__(self, state: dict) -> None:
        self.experiment_uri = THIS_RUN.get("experiment", state["experiment_uri"])
        db = state["optuna_db"]
        self.optuna_db = Path(THIS_RUN["out"]) / db.name if db is not None and "out" in THIS_RUN else db
        self.staging, self.written = None, 0

    def on_step_begin(self, iteration: int, trials: list, **info: Any) -> None:
        if self.staging is None and trials:  # where Tune stages its snapshot before copying it
            self.staging = Path(trials[0].storage.experiment_driver_staging_path)

    def get_state(self) -> dict | None:
        files = _snapshot_files(self.staging) if self.staging is not None else None
        if files is not None:
            if self.optuna_db is not None and self.optuna_db.is_file():
                files[OPTUNA_DB] = _sqlite_backup(self.optuna_db)
            stored.write_atomically(stored.join(self.experiment_uri, BUNDLE), _zipped(files))
            self.written += 1
        return None  # nothing of its own for Tune to restore


def _snapshot_files(staging: Path) -> dict[str, bytes] | None:
    """The newest session's three state files in the staging folder; None until Tune has written all three."""
    states = sorted(staging.glob(TUNE_STATE[0].format("*")))
    if not states:
        return None
    session = states[-1].name.removeprefix("experiment_state-").removesuffix(".json")
    paths = [staging / template.format(session) for template in TUNE_STATE]
    if not all(p.is_file() for p in paths):
        return None
    return {p.name: p.read_bytes() for p in paths}


def _sqlite_backup(db: Path) -> bytes:
    """A consistent copy of a SQLite database another connection may be writing."""
    with tempfile.TemporaryDirectory(prefix="sptune-optuna-") as tmp:
        copy = Path(tmp) / db.name
        source, target = sqlite3.connect(db), sqlite3.connect(copy)
        try:
            source.backup(target)
        finally:
            source.close()
            target.close()
        return copy.read_bytes()


def _zipped(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def read_bundle(experiment_uri: str) -> dict[str, bytes] | None:
    """The files of the last snapshot a driver bundled under the storage folder; None when there is none."""
    uri = stored.join(experiment_uri, BUNDLE)
    if not stored.exists(uri):
        return None
    with zipfile.ZipFile(io.BytesIO(stored.read_bytes(uri))) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def restore_consistent(experiment_uri: str) -> str | None:
    """Put the last bundled snapshot's files back under the storage folder, in place of whatever mix the
    interrupted copy left; returns the snapshot's session, or None when no bundle exists (a Tuner that never
    bundled one: Tune's files are used as they are)."""
    files = read_bundle(experiment_uri)
    if files is None:
        return None
    state_names = [n for n in files if n != OPTUNA_DB]
    for name in state_names:
        stored.write_atomically(stored.join(experiment_uri, name), files[name])
    session = next(n for n in state_names if n.startswith("experiment_state-"))
    session = session.removeprefix("experiment_state-").removesuffix(".json")
    _drop_newer_sessions(experiment_uri, session)
    return session


def _drop_newer_sessions(experiment_uri: str, session: str) -> None:
    """Tune restores the newest session's files (by name): a later session's files, copied by a driver
    that died before it bundled one, would win over the consistent ones just written back."""
    for name in stored.list_names(experiment_uri):
        for template in TUNE_STATE:
            prefix, suffix = template.split("{}")
            if name.startswith(prefix) and name.endswith(suffix) and name > template.format(session):
                stored.delete_file(stored.join(experiment_uri, name))
