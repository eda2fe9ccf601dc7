"""From command-line options to a ready study (or campaign of studies), checking everything
on the way; the order runs from cheap to slow: spec and data, output directories, the
tracking server, then the Ray cluster."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from sptune import storage as stored
from sptune.errors import SpecError, SptuneError
from sptune.machine import local_cpus
from sptune.output_files import MLFLOW_DB, SPT_CACHE, STATE
from sptune.plan.capacity import concurrency, local_gpus
from sptune.plan.study_plan import StudyPlan
from sptune.preflight.cpus import check_cpu_request
from sptune.preflight.gpus import check_gpu_request
from sptune.preflight.inputs import StudyInputs, load_inputs
from sptune.preflight.options import RunOptions
from sptune.preflight.outputs import (
    check_optuna_record,
    check_output_dir,
    check_tracking_store,
    default_output_dir,
    fetch_from_storage,
)
from sptune.preflight.services import (
    check_optuna_storage,
    check_ray_head,
    check_storage,
    check_storage_for_nodes,
    check_tracking_server,
    ray_address,
)
from sptune.spec import read_yaml
from sptune.spec.campaign import CampaignStudy, expand, is_campaign
from sptune.storage import join
from sptune.study import ray_session
from sptune.study.ready_study import ReadyCampaign, ReadyStudy, TrackingTarget
from sptune.study.state import read_state
from sptune.tracking.optuna_studies import given_url


@dataclass(frozen=True)
class PlannedStudy:
    """One study's checked inputs; `member` is its entry in a campaign (None for a lone study)."""

    inputs: StudyInputs
    overrides: tuple[str, ...]  # every --set applied to the spec file, the campaign's first
    member: CampaignStudy | None = None


@dataclass(frozen=True)
class PlannedRun:
    """What --dry-run prints: every study's plan, nothing started or written."""

    studies: tuple[PlannedStudy, ...]
    campaign: str | None = None


def prepare_inputs(options: RunOptions) -> PlannedRun:
    """The spec file (or campaign), every study's spec, data and plan."""
    raw = options.spec_mapping()
    if not is_campaign(raw):
        inputs = load_inputs(raw, options.overrides, options.data_dir)
        return PlannedRun((PlannedStudy(inputs, options.overrides),))
    planned = []
    # A campaign given as a mapping names its studies' spec files relative to the working directory.
    for member in expand(raw, options.spec_path or Path.cwd() / "campaign"):
        try:
            overrides = (*member.overrides, *options.overrides)
            inputs = load_inputs(read_yaml(member.spec_path), overrides, options.data_dir)
        except SptuneError as err:
            where = f"campaign study '{member.name}' ({member.spec_path.name}): {err.where}"
            raise type(err)(where, err.problem, err.fix) from None
        planned.append(PlannedStudy(inputs, overrides, member))
    return PlannedRun(tuple(planned), campaign=raw["campaign"])


@dataclass(frozen=True)
class DryRun:
    """What --dry-run prints: every study's plan, and the checks of a real run it could not make, each with why."""

    planned: PlannedRun
    unchecked: tuple[str, ...]


def dry_run(options: RunOptions) -> DryRun:
    """Every check `prepare` makes before it starts anything, with nothing started, fetched or written."""
    planned = prepare_inputs(options)
    _, unchecked = _checked_studies(options, planned, output_root(options, planned), dry=True)
    return DryRun(planned, tuple(unchecked))


def prepare(options: RunOptions) -> ReadyStudy | ReadyCampaign:
    planned = prepare_inputs(options)
    root = output_root(options, planned)
    studies, _ = _checked_studies(options, planned, root, dry=False)
    cluster = _connect_cluster(ray_address(options.address), options.storage)
    if cluster is not None:
        try:
            _check_gpus(planned.studies, cluster.largest_node_gpus, "the Ray cluster's largest node")
            _check_cpus(planned.studies, cluster.cpus, "the Ray cluster")
        except SptuneError:
            ray_session.release()
            raise
    studies = [dataclasses.replace(s, plan=_fit(s.plan, cluster)) for s in studies]
    if planned.campaign is None:
        return studies[0]
    members = tuple(p.member for p in planned.studies)
    return ReadyCampaign(planned.campaign, root, tuple(studies), members)


def output_root(options: RunOptions, planned: PlannedRun) -> Path:
    """The study's (or campaign's) output folder; absolute: trials run in their own working directories and open
    files the driver writes here."""
    name = planned.campaign or planned.studies[0].inputs.spec.name
    return (options.output or default_output_dir(name)).expanduser().resolve()


def _checked_studies(options: RunOptions, planned: PlannedRun, root: Path,
                     dry: bool) -> tuple[list[ReadyStudy], list[str]]:
    """Every check short of joining a Ray cluster, in order from cheap to slow; a dry run fetches nothing from
    --storage and returns what it could not check instead."""
    unchecked = []
    stored.set_moves({})  # this run's own folder moves only (`_ready_study`)
    address = ray_address(options.address)
    if not address and not ray_session.is_connected():  # Ray starts on this machine later, with what it finds
        _check_gpus(planned.studies, local_gpus(), "this machine")
        _check_cpus(planned.studies, float(local_cpus()), "this machine")
    elif dry and ray_session.is_connected():  # a Ray driver this process already runs: asking it starts nothing
        _check_gpus(planned.studies, ray_session.largest_node_gpus(), "the Ray cluster's largest node")
        _check_cpus(planned.studies, ray_session.cluster_cpus() or 0.0, "the Ray cluster")
    elif dry:
        unchecked.append(f"resources.gpu and resources.cpu against the Ray cluster at {address}: its nodes are known "
                         "only once joined, which starts a Ray driver")
    if address:
        check_ray_head(address)
    check_storage(options.storage)
    in_campaign = planned.campaign is not None
    fetched = dry and options.resume and options.output is not None and stored.is_remote(options.storage)
    if fetched:
        unchecked.append("the resumed study's folder: a real run first fetches its files from --storage into "
                         "--output, which a dry run does not write")
    studies = [_ready_study(options, p, root, in_campaign, fetch=not dry) for p in planned.studies]
    if in_campaign and options.resume and not fetched and all(s.resume_state is None for s in studies):
        raise SpecError(
            f"--output {root}", "no interrupted campaign to resume here (none of its studies has a study_state.json)",
            "pass --output DIR of the campaign to continue",
        )
    for uri in dict.fromkeys(s.tracking.uri for s in studies):
        check_tracking_server(uri)
    for study in studies:
        if study.optuna_storage is not None:
            check_optuna_storage(study.optuna_storage, study.run_name, study.resume_state is not None)
    return studies, unchecked


def _ready_study(options: RunOptions, planned: PlannedStudy, root: Path, in_campaign: bool,
                 fetch: bool = True) -> ReadyStudy:
    spec, member = planned.inputs.spec, planned.member
    out = root / member.name if in_campaign else root
    storage = options.storage
    if storage is not None and in_campaign:
        storage = join(storage, member.name)
    if options.output is not None and fetch:  # --resume from a remote --storage alone: its files come first
        fetch_from_storage(out, storage, options.resume)
    # A campaign resumed: the studies it had not reached yet start new (prepare checks one had started).
    resume = options.resume and (not in_campaign or (out / STATE).exists())
    unfetched = not fetch and resume and stored.is_remote(storage) and not (out / STATE).exists()
    # A dry run's resume from --storage alone: the folder's files are not fetched, so not checked (it says so).
    state = None if unfetched else check_output_dir(out, spec, resume, explicit=options.output is not None)
    if state is not None and state.output_dir:  # a copied study folder: its paths are read under the copy
        old = Path(state.output_dir)
        stored.follow_folder_move(old.parent if in_campaign else old, root)
        state = read_state(out)
    optuna_storage = given_url(options.optuna_storage)
    if state is not None:
        check_optuna_record(out, optuna_storage)
        check_tracking_store(state)
    store_dir = root  # a campaign keeps one MLflow store for all its studies
    uri = (state.tracking_uri if state else None) or options.tracking_uri or spec.tracking.uri
    uri = uri or f"sqlite:///{(store_dir / MLFLOW_DB).resolve()}"
    return ReadyStudy(
        spec_path=member.spec_path if member else options.spec_path,
        given_spec=None if member else options.spec,
        overrides=planned.overrides,
        spec=spec,
        data=planned.inputs.data,
        plan=planned.inputs.plan,
        output_dir=out,
        run_name=member.name if in_campaign else spec.name,
        tracking=TrackingTarget(uri, spec.tracking.experiment or f"sptune-{spec.name}", store_dir),
        resume_state=state,
        storage=storage,
        spt_cache_dir=root / SPT_CACHE if in_campaign else None,
        optuna_storage=optuna_storage,
    )


class ClusterShape(NamedTuple):
    cpus: float
    gpus: float
    largest_node_gpus: float


def _connect_cluster(address: str | None, storage: str | None) -> ClusterShape | None:
    """Join the cluster (if one is named, or the caller already runs Ray) and check it can hold
    the study; the CPUs and GPUs it offers size the concurrency. A local instance starts later."""
    if address and not ray_session.is_connected():
        ray_session.join(address)
    if not ray_session.is_connected():
        return None
    try:
        check_storage_for_nodes(storage, ray_session.alive_nodes())
    except SptuneError:
        ray_session.release()
        raise
    return ClusterShape(ray_session.cluster_cpus() or 0.0, ray_session.cluster_gpus(), ray_session.largest_node_gpus())


def _check_cpus(studies: tuple[PlannedStudy, ...], cpus: float, where: str) -> None:
    for study in studies:
        try:
            check_cpu_request(study.inputs.spec, cpus, where)
        except SpecError as err:
            if study.member is None:
                raise
            member = f"campaign study '{study.member.name}' ({study.member.spec_path.name})"
            raise SpecError(f"{member}: {err.where}", err.problem, err.fix) from None


def _check_gpus(studies: tuple[PlannedStudy, ...], node_gpus: float, where: str) -> None:
    for study in studies:
        try:
            check_gpu_request(study.inputs.spec, node_gpus, where)
        except SpecError as err:
            if study.member is None:
                raise
            member = f"campaign study '{study.member.name}' ({study.member.spec_path.name})"
            raise SpecError(f"{member}: {err.where}", err.problem, err.fix) from None


def _fit(plan: StudyPlan, cluster: ClusterShape | None) -> StudyPlan:
    if not cluster or not cluster.cpus:
        return plan
    return dataclasses.replace(plan, concurrency=concurrency(plan.spec, cluster.cpus, cluster.gpus))
