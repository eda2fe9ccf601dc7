"""sptune's Optuna studies: their names, their database, and what the report reads back.

Each variant's Optuna search (and each pretraining's) is an Optuna study named
``STUDY/VARIANT`` (``STUDY/pretrain``, ``STUDY/pretrain-causal`` ... for pretraining), where
STUDY is the sptune study's name (a campaign's member name). By default the studies live in
``OUTPUT/optuna.db`` (SQLite); ``--optuna-storage URL`` (or ``$SPTUNE_OPTUNA_STORAGE``) puts them
in a shared database, e.g. PostgreSQL on a cluster. ``OUTPUT/optuna.json`` records where they
are (the URL without its password; null for the output dir's optuna.db) and which study is
whose, so ``variant_importances`` finds them again.

A password in the URL is never printed, logged or written: everything shown or saved uses
``redact``, and the storage pickles without it (Ray saves each searcher, and so its storage,
into the experiment's files). A process that unpickles one reconnects with the full URL it was
given itself (``--optuna-storage`` again on --resume); libpq's PGPASSWORD or ~/.pgpass keep
the password out of the URL altogether.
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import optuna
from optuna.storages import RDBStorage
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, InterfaceError, OperationalError, SQLAlchemyError

from sptune.errors import RuntimeFailure
from sptune.output_files import OPTUNA_DB, OPTUNA_RECORD
from sptune.plan.study_plan import SearchPlan
from sptune.tracking.db_templates import SQLITE_PREFIX, schema_key, seed, sqlite_path

T = TypeVar("T")
ENV_URL = "SPTUNE_OPTUNA_STORAGE"
HIDDEN = "***"
# Fewer COMPLETE trials than this say nothing about which parameter matters (PED-ANOVA, Optuna's
# default evaluator, compares the top 10 % of trials with all of them).
MIN_TRIALS_FOR_IMPORTANCE = 4

_known_urls: dict[str, str] = {}  # redacted URL -> the full URL this process was given


def default_url(output_dir: Path) -> str:
    """The output directory's own SQLite database (an absolute path: Ray changes directories)."""
    return f"sqlite:///{(output_dir / OPTUNA_DB).resolve()}"


def follow_move(old_output_dir: Path, new_output_dir: Path) -> None:
    """A study resumed into another output directory (from a remote --storage alone): the searchers
    Tune restores reconnect to the new directory's optuna.db, not to the old one they were pickled with."""
    old, new = default_url(old_output_dir), default_url(new_output_dir)
    if old != new:
        _known_urls[redact(old)] = new


def redact(url: str) -> str:
    """The URL with its password (``user:PASSWORD@`` or ``?password=``) replaced by ***."""
    try:
        parsed = make_url(url)
    except ArgumentError:  # not parseable: hide anything between ':' and '@' after the scheme
        return re.sub(r"(//[^/@:]*):[^/@]*@", rf"\1:{HIDDEN}@", url)
    if "password" in parsed.query:
        parsed = parsed.update_query_dict({"password": HIDDEN})
    return parsed.render_as_string(hide_password=True)


def given_url(explicit: str | None) -> str | None:
    """--optuna-storage wins, then $SPTUNE_OPTUNA_STORAGE; None: the output dir's optuna.db."""
    return explicit or os.environ.get(ENV_URL) or None


def _full_url(redacted: str) -> str:
    """The URL to reconnect with: the one this process was given (or $SPTUNE_OPTUNA_STORAGE)
    that redacts to the same text; one without a password is its own."""
    env = os.environ.get(ENV_URL)
    if env:
        _known_urls.setdefault(redact(env), env)
    if redacted in _known_urls:
        return _known_urls[redacted]
    if HIDDEN in redacted:
        raise RuntimeFailure(
            f"--optuna-storage {redacted}",
            "this process does not know the Optuna database's password (it is never saved)",
            f"pass --optuna-storage with the password again, or set {ENV_URL}",
        )
    return redacted


class PasswordFreeStorage(RDBStorage):
    """An RDBStorage that pickles without its password and reconnects by URL when unpickled."""

    def __getstate__(self) -> dict[Any, Any]:
        return {**super().__getstate__(), "url": redact(self.url)}

    def __setstate__(self, state: dict[Any, Any]) -> None:
        super().__setstate__({**state, "url": _full_url(state["url"])})


def name_value(study: optuna.Study, name: str) -> None:
    """The objective's name as optuna-dashboard and Optuna's plots show it."""
    with warnings.catch_warnings():  # Optuna marks metric names experimental; they are only a label
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        study.set_metric_names([name])


SEARCH_TRIAL = "search_trial"  # user attr of a database trial: its number in the searcher's own study
# How long a database write waits for a database that stopped answering (a restart, a failover) before the
# study stops as an interrupt does (`sptune.study.faults`); MLflow's HTTP client waits out a server its own way.
OUTAGE_ENV = "SPTUNE_OUTAGE_WAIT_S"
OUTAGE_WAIT_S = 600.0


def outage_wait_s() -> float:
    try:
        return max(0.0, float(os.environ.get(OUTAGE_ENV, OUTAGE_WAIT_S)))
    except ValueError:
        return OUTAGE_WAIT_S


def waits_out_outages(method: Callable[..., T]) -> Callable[..., T]:
    """A database write retried while the database does not answer (connection refused or dropped), every 1,
    2, 4 ... 15 s, for up to `outage_wait_s`; then its error goes on. Each method retried is whole: it reads
    the database trial it changes again first, so a retry repeats nothing that already happened."""

    @functools.wraps(method)
    def retried(*args: Any, **kwargs: Any) -> T:
        deadline, pause = time.monotonic() + outage_wait_s(), 1.0
        while True:
            try:
                return method(*args, **kwargs)
            except (OperationalError, InterfaceError) as err:
                if time.monotonic() + pause > deadline:
                    raise
                if pause == 1.0:  # once per outage: the terminal says why the study waits
                    reason = redact(str(err.orig or err)).strip().splitlines()[0][:200]
                    print(f"[sptune] the Optuna database does not answer ({reason}); waiting up to "
                          f"{outage_wait_s():.0f} s ({OUTAGE_ENV})", file=sys.stderr, flush=True)
                time.sleep(pause)
                pause = min(pause * 2, 15.0)

    return retried


class OptunaStudyMirror:
    """One search's persisted Optuna study, kept equal to the study its searcher samples from.

    The searcher samples from an in-memory study that Ray saves with every experiment snapshot, so a
    resumed search is exactly the one Tune restores. Sampling from the database would not be: the
    database runs ahead of Tune's last snapshot (asks and tells made after it), so a resumed TPE would
    count trials its restored state never made and propose other configs than the uninterrupted search.
    Each trial of the searcher's study is written here as the database trial whose user attr
    ``search_trial`` is its number. A resume replays the trials after the snapshot with the same numbers
    and params, and continues the same database trials, so the database ends as an uninterrupted
    search would leave it; one asked before an interruption and never replayed is failed by `close`."""

    def __init__(self, storage: PasswordFreeStorage, study_name: str) -> None:
        self.storage, self.study_name = storage, study_name
        self._study_id: int | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"storage": self.storage, "study_name": self.study_name}  # the storage pickles without its password

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.storage, self.study_name, self._study_id = state["storage"], state["study_name"], None

    @property
    def study_id(self) -> int:
        if self._study_id is None:
            self._study_id = self.storage.get_study_id_from_name(self.study_name)
        return self._study_id

    def _find(self, number: int) -> optuna.trial.FrozenTrial | None:
        trials = self.storage.get_all_trials(self.study_id, deepcopy=False)
        found = [t for t in trials if t.user_attrs.get(SEARCH_TRIAL) == number]
        return found[-1] if found else None

    @waits_out_outages
    def asked(self, trial: optuna.trial.FrozenTrial) -> None:
        """The searcher proposed `trial` (its number, params and user attrs)."""
        found = self._find(trial.number)
        if found is not None and found.params == trial.params:  # replayed after a resume: the same trial
            if found.state == optuna.trial.TrialState.RUNNING:
                for key, value in trial.user_attrs.items():  # e.g. the Ray trial now running it
                    self.storage.set_trial_user_attr(found._trial_id, key, value)
            return
        if found is not None and found.state == optuna.trial.TrialState.RUNNING:  # replayed differently
            self.storage.set_trial_state_values(found._trial_id, optuna.trial.TrialState.FAIL)
        template = optuna.trial.create_trial(
            state=optuna.trial.TrialState.RUNNING,
            params=trial.params,
            distributions=trial.distributions,
            user_attrs={**trial.user_attrs, SEARCH_TRIAL: trial.number},
        )
        self.storage.create_new_trial(self.study_id, template_trial=template)

    @waits_out_outages
    def reported(self, number: int, step: int, value: float) -> None:
        found = self._find(number)
        if found is not None and found.state == optuna.trial.TrialState.RUNNING:
            self.storage.set_trial_intermediate_value(found._trial_id, step, value)

    @waits_out_outages
    def told(self, trial: optuna.trial.FrozenTrial) -> None:
        """The searcher's study ended `trial` (its state, value and user attrs)."""
        found = self._find(trial.number)
        if found is None or found.state.is_finished():  # told already, before an interruption
            return
        for key, value in trial.user_attrs.items():
            self.storage.set_trial_user_attr(found._trial_id, key, value)
        self.storage.set_trial_state_values(found._trial_id, trial.state, trial.values)


@functools.cache
def open_storage(url: str) -> PasswordFreeStorage:
    """One storage (one connection pool) per database per process."""
    _known_urls[redact(url)] = url
    path = sqlite_path(url)
    if path is not None:  # a new SQLite database: a copy of an empty one, not built table by table
        seed(path, _schema_key(), _create_empty_database)
    # pool_pre_ping: a study runs for hours, and a server closes idle connections meanwhile.
    return PasswordFreeStorage(url, engine_kwargs={"pool_pre_ping": True})


def _create_empty_database(db: Path) -> None:
    RDBStorage(f"{SQLITE_PREFIX}{db}").engine.dispose()  # builds the tables; no pooled connection left open


def _schema_key() -> str:
    migrations = Path(optuna.__file__).parent / "storages" / "_rdb" / "alembic" / "versions"
    return schema_key("optuna", optuna.__version__, migrations.glob("*.py"))


def search_name(search: SearchPlan) -> str:
    """The variant, or for pretraining its stage (pretrain, pretrain-causal, pretrain-on-TASK)."""
    return search.label if search.is_pretraining else search.variant


def uses_optuna(search: SearchPlan) -> bool:
    """Grids, random draws and re-runs (given configs) have no Optuna study."""
    return search.searcher == "optuna" and search.fixed_configs is None and search.n_trials > 0


@dataclass(frozen=True)
class OptunaTarget:
    """Where one sptune study's Optuna studies live, and its name that prefixes theirs."""

    url: str = field(repr=False)  # may hold a password: show redact(url)
    study: str  # the sptune study's name (ReadyStudy.run_name)
    task: str

    def __post_init__(self) -> None:
        # Known before any Tuner is restored: its searchers' storages unpickle without the password.
        _known_urls[redact(self.url)] = self.url

    def study_name(self, search: SearchPlan) -> str:
        return f"{self.study}/{search_name(search)}"

    def create(self, search: SearchPlan, value_is: str | None = None) -> optuna.Study:
        """The search's Optuna study (the same one again on --resume), described by its user attrs;
        `value_is` names the value each trial is told (default: the search's metric)."""
        study = optuna.create_study(
            storage=open_storage(self.url),
            study_name=self.study_name(search),
            load_if_exists=True,
            direction="maximize" if search.mode == "max" else "minimize",
        )
        task = search.pretrain_source.task.name if search.is_pretraining and search.pretrain_source.task else self.task
        attrs = {
            "sptune_study": self.study,
            "variant": search_name(search),
            "phase": search.phase,
            "task": task,
            "metric": search.metric,
            "value_is": value_is or search.metric,
            "direction": search.mode,
            "search_space": {name: p.model_dump() for name, p in search.space.items() if p.type != "grid"},
        }
        for key, value in attrs.items():
            study.set_user_attr(key, value)
        name_value(study, value_is or search.metric)
        return study

    @waits_out_outages
    def close(self, searches: tuple[SearchPlan, ...]) -> None:
        """After a Tuner: a trial Optuna was never told about (asked just before an interruption,
        then re-proposed after the resume) ends FAIL, so no study is left with RUNNING trials."""
        storage = open_storage(self.url)
        for search in filter(uses_optuna, searches):
            study = optuna.load_study(study_name=self.study_name(search), storage=storage)
            for trial in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
                study.tell(trial.number, state=optuna.trial.TrialState.FAIL)

    def record(self, output_dir: Path, searches: list[SearchPlan], default: bool) -> None:
        """OUTPUT/optuna.json: where this study's Optuna studies are (no password) and whose each is."""
        names = {search_name(s): self.study_name(s) for s in searches if uses_optuna(s)}
        record = {"storage": None if default else redact(self.url), "studies": names}
        (output_dir / OPTUNA_RECORD).write_text(json.dumps(record, indent=2))

    def dashboard_command(self) -> str:
        return f"optuna-dashboard {redact(self.url)}"


def recorded_storage(run_dir: Path) -> str | None:
    """The redacted URL a study's Optuna studies were put in; None: its optuna.db (or none)."""
    path = run_dir / OPTUNA_RECORD
    return json.loads(path.read_text())["storage"] if path.exists() else None


def _run_studies(run_dir: Path) -> tuple[str, dict[str, str]] | None:
    """(URL, variant -> Optuna study name) of the study in run_dir; None when it has none."""
    path = run_dir / OPTUNA_RECORD
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    if record["storage"] is None:
        db = run_dir / OPTUNA_DB
        return (default_url(run_dir), record["studies"]) if db.exists() else None
    return _full_url(record["storage"]), record["studies"]


def variant_importances(run_dir: Path) -> dict[str, dict[str, float]]:
    """variant (or pretraining stage) -> {searched parameter: importance} by Optuna's own default
    evaluator (``optuna.importance.get_param_importances``, PED-ANOVA), importances summing to 1.

    Only studies with at least MIN_TRIALS_FOR_IMPORTANCE COMPLETE trials and at least two searched
    parameters are included: with one parameter the importance is 1.0 by construction and says
    nothing. {} when the study in run_dir has no Optuna studies (no optuna.json / optuna.db).
    For a study run with --optuna-storage the password (if the URL needs one) comes from
    $SPTUNE_OPTUNA_STORAGE or libpq's PGPASSWORD / ~/.pgpass; it is never saved. A database that
    cannot be read (unknown password, no answer) gives {} and a warning saying why."""
    try:
        found = _run_studies(Path(run_dir))
        return _importances(*found) if found else {}
    except (RuntimeFailure, SQLAlchemyError, ImportError) as err:
        # The report still renders without them; why they are missing is said, without a password.
        warnings.warn(f"sptune: Optuna importances left out: {redact(str(err))}", stacklevel=2)
        return {}


def _importances(url: str, names: dict[str, str]) -> dict[str, dict[str, float]]:
    storage = open_storage(url)
    existing = set(optuna.get_all_study_names(storage))
    importances = {}
    for variant, name in names.items():
        if name not in existing:
            continue  # its Tuner never started
        study = optuna.load_study(study_name=name, storage=storage)
        complete = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        searched = {p for t in complete for p in t.params}
        if len(complete) >= MIN_TRIALS_FOR_IMPORTANCE and len(searched) >= 2:
            with warnings.catch_warnings():  # "too few trials": the threshold above already decided
                warnings.simplefilter("ignore")
                importances[variant] = dict(optuna.importance.get_param_importances(study))
    return importances
