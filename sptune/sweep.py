"""`python -m sptune.sweep SPEC.yaml`: validate, plan, run a fair SPT study, report.

Everything that can be checked is checked before Ray starts or an MLflow run exists:
the spec, the task's data and the tracking store. Input errors exit with status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback
from pathlib import Path

import yaml

from sptune.errors import RuntimeFailure, SpecError, SptuneError
from sptune.plan import StudyPlan, build_plan, describe
from sptune.spec import SweepSpec, load_spec, read_yaml
from sptune.tasks import TaskRequest, check_task, load_task
from sptune.tasks.base import TaskInfo, TaskSplits
from sptune.tasks.registry import resolve_data_dir


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m sptune.sweep", description=__doc__.splitlines()[0])
    p.add_argument("spec", help="sweep spec YAML (see search_spaces/)")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY.PATH=VALUE",
        help="override a spec field, e.g. --set finetune.epochs=5 (repeatable)",
    )
    p.add_argument("--output", type=Path, help="study output directory (default runs/<name>-<time>)")
    p.add_argument("--data-dir", help="where downloaded data lives (or SPTUNE_DATA_DIR)")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: SQLite in the output directory)")
    p.add_argument("--address", default=None, help="Ray cluster address (default: RAY_ADDRESS or local)")
    p.add_argument(
        "--storage",
        help="Tune storage path or URI (default OUTPUT/ray_results; must be shared "
        "storage, e.g. NFS or s3://, on a multi-node cluster)",
    )
    p.add_argument("--resume", action="store_true", help="continue the interrupted study in --output DIR")
    p.add_argument("--dry-run", action="store_true", help="print the plan and exit without training")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    return p.parse_args(argv)


def check_spec_against_task(spec: SweepSpec, info: TaskInfo) -> None:
    p = spec.pretrain
    if p is not None and spec.needs_pretraining() and info.input_kind == "tokens" and p.loss != "ce":
        raise SpecError(
            "pretrain.loss", f"task '{info.name}' has token inputs; '{p.loss}' needs continuous values", "use loss: ce"
        )


def _absolute_paths(spec: SweepSpec) -> None:
    """Trials run in their own working directories (possibly on other nodes): file paths in
    the spec are resolved against the directory the user ran the command from."""
    if spec.language_model is not None:
        spec.language_model.path = str(Path(spec.language_model.path).expanduser().resolve())
    if spec.pretrain is not None and spec.pretrain.checkpoint:
        spec.pretrain.checkpoint = str(Path(spec.pretrain.checkpoint).expanduser().resolve())


def prepare(args: argparse.Namespace) -> tuple[SweepSpec, TaskSplits, StudyPlan]:
    spec = load_spec(args.spec, args.overrides)
    _absolute_paths(spec)
    request = TaskRequest(spec.task.name, spec.task.options, spec.seed, resolve_data_dir(args.data_dir))
    check_task(request)
    data = load_task(request)
    check_spec_against_task(spec, data.info)
    if spec.pretrain is not None and spec.pretrain.checkpoint:
        from sptune.build import encoder_config
        from sptune.checkpoints import check_spt_checkpoint
        from sptune.models import Encoder

        check_spt_checkpoint(spec.pretrain.checkpoint, Encoder(encoder_config(spec.model, data.info)))
    if spec.language_model is not None:
        from sptune.models.lm import check_language_model

        check_language_model(spec.language_model.path, data.info.seq_len)
    summary = (
        f"{len(data.train)} train / {len(data.val)} val from {data.source or spec.task.name}; "
        "test split sealed until the final evaluation"
    )
    sources = load_source_tasks(spec, args)
    return spec, data, build_plan(spec, data.info, data_summary=summary, source_data=sources)


def load_source_tasks(spec: SweepSpec, args: argparse.Namespace) -> dict[str, TaskSplits]:
    """spt_cross: the other tasks to pretrain on, checked and loaded before anything starts."""
    loaded: dict[str, TaskSplits] = {}
    for source in spec.pretraining_sources():
        if source.task is None:
            continue
        where = next(
            f"variants.{v}.source_task"
            for v in spec.variants
            if (s := spec.variant_source(v)) is not None and s.stage_name == source.stage_name
        )
        request = TaskRequest(source.task.name, source.task.options, spec.seed, resolve_data_dir(args.data_dir))
        try:
            check_task(request)
            data = load_task(request)
            check_spec_against_task(spec, data.info)
        except SptuneError as err:
            raise type(err)(f"{where} ({err.where})", err.problem, err.fix) from None
        loaded[source.stage_name] = data
    return loaded


def output_dir_for(spec: SweepSpec, explicit: Path | None) -> Path:
    return explicit if explicit else Path("runs") / f"{spec.name}-{time.strftime('%Y%m%d-%H%M%S')}"


def _quiet_ray() -> None:
    # sptune prints its own per-stage progress; Tune's banners and sync warnings are noise here.
    os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")


def _check_ray_address(address: str, timeout: float = 5.0) -> None:
    """Fail in seconds: ray.init retries a GCS that does not answer for many minutes."""
    import socket

    if address in ("auto", "local"):
        return
    host, _, port = address.split("://", 1)[-1].rpartition(":")
    if not host or not port.isdigit():
        raise SpecError("--address", f"'{address}' is not HOST:PORT", "pass the head's GCS address, e.g. 10.0.0.5:6379")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except OSError as err:
        raise RuntimeFailure(
            f"--address {address}",
            f"no Ray head answers there ({err.strerror or type(err).__name__})",
            "start one with `ray start --head --port PORT` and pass the address it prints, or drop --address "
            "(and RAY_ADDRESS) to run on a local Ray instance",
        ) from None


def _start_ray(address: str | None) -> bool:
    """Connect to (or start) Ray; True when this process started it and must stop it."""
    import ray

    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS")
    if address:
        _check_ray_address(address)
        try:
            ray.init(address=address, log_to_driver=False)
        except (ConnectionError, RuntimeError) as err:  # e.g. token auth refused the connection
            raise RuntimeFailure(
                f"--address {address}",
                f"could not join the Ray cluster ({str(err).splitlines()[0][:200]})",
                "check the address; a cluster started with token auth needs RAY_AUTH_MODE=token and its token "
                "(~/.ray/auth_token, RAY_AUTH_TOKEN_PATH or RAY_AUTH_TOKEN) in this environment",
            ) from err
    else:
        # Ask Ray to use loopback for a local instance (the dashboard is off; Ray may still
        # bind its GCS port on the machine's address, see docs/cluster.md).
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False, _node_ip_address="127.0.0.1")
    return True


def _spec_text(spec: SweepSpec) -> str:
    return yaml.safe_dump(spec.model_dump(mode="json"), sort_keys=False)


def check_output_dir(args: argparse.Namespace, spec: SweepSpec, out: Path) -> dict | None:
    """A new study needs a fresh directory; --resume needs the same study's directory."""
    from sptune.study import read_state

    state = read_state(out) if out.exists() else None
    if not args.resume:
        if state is not None:
            raise SpecError(
                f"--output {out}",
                "this directory already holds a study",
                "pass --resume to continue it, or choose a new --output",
            )
        return None
    if args.output is None or state is None:
        raise SpecError(
            f"--output {out}",
            "no interrupted study to resume here (no study_state.json)",
            "pass --output DIR of the study to continue",
        )
    saved = (out / "spec.yaml").read_text()
    if saved != _spec_text(spec):
        raise SpecError(
            f"{out / 'spec.yaml'}",
            "the spec differs from the one the study started with",
            "resume with the same spec and --set overrides, or start a new study in a new --output",
        )
    return state


def _check_storage(storage: str | None) -> None:
    """Multi-node clusters need storage every node can reach; the default is local."""
    import ray

    alive = [n for n in ray.nodes() if n.get("Alive")]
    if len(alive) > 1 and storage is None:
        raise SpecError(
            "--storage",
            f"the cluster has {len(alive)} nodes but results would go to a local directory of this machine",
            "pass --storage pointing at shared storage (NFS path or s3://)",
        )


def _storage_for(args: argparse.Namespace, name: str | None) -> str | None:
    if args.storage is None or name is None:
        return args.storage
    return f"{args.storage.rstrip('/')}/{name}"


def run_study(
    args: argparse.Namespace,
    spec: SweepSpec,
    data: TaskSplits,
    plan: StudyPlan,
    out: Path,
    campaign_root: Path | None = None,
) -> Path:
    """Run one study into ``out`` (Ray already started); returns its results.json."""
    from sptune.study import Study
    from sptune.tracking import Tracker, default_tracking_uri, ui_command

    state = check_output_dir(args, spec, out)
    plan = _fit_to_cluster(plan)
    out.mkdir(parents=True, exist_ok=True)
    (out / "spec.yaml").write_text(_spec_text(spec))
    # A campaign keeps one MLflow store for all its studies.
    store_dir = campaign_root or out
    uri = (state and state.tracking_uri) or args.tracking_uri or spec.tracking.uri or default_tracking_uri(store_dir)
    tracker = Tracker(uri, spec.tracking.experiment or f"sptune-{spec.name}", store_dir)
    print(describe(plan), flush=True)
    try:
        tracker.start_parent(
            out.name if campaign_root else spec.name,
            {"spec": args.spec, "task": spec.task.name, "seed": spec.seed, "output_dir": str(out.resolve())},
            existing_run_id=state.parent_run_id if state else None,
        )
        storage = _storage_for(args, out.name if campaign_root else None)
        # Studies of one campaign share SPT checkpoints when their pretraining is identical.
        cache = campaign_root / "spt_cache" if campaign_root else None
        Study(plan, data, out, tracker, resume=args.resume, storage=storage, spt_cache_dir=cache).run()
        tracker.finish("FINISHED")
    except BaseException:
        tracker.finish("FAILED")
        raise
    print(f"Results: {out / 'results.md'} and {out / 'results.json'}")
    print(f"MLflow UI: {ui_command(uri, store_dir, tracker.experiment_id)}")
    return out / "results.json"


def _fit_to_cluster(plan: StudyPlan) -> StudyPlan:
    """Concurrent trials from the connected cluster's CPUs (the plan was made before Ray started)."""
    import dataclasses

    import ray

    from sptune.plan import concurrency

    cpus = ray.cluster_resources().get("CPU")
    return dataclasses.replace(plan, concurrency=concurrency(plan.spec, cpus)) if cpus else plan


def _with_ray(args: argparse.Namespace, body) -> None:
    _quiet_ray()
    started_ray = _start_ray(args.address)
    try:
        _check_storage(args.storage)
        body()
    finally:
        if started_ray:
            import ray

            ray.shutdown()


def run(args: argparse.Namespace) -> int:
    from sptune.campaign import is_campaign

    raw = read_yaml(args.spec)
    if is_campaign(raw):
        return run_campaign(args, raw)
    spec, data, plan = prepare(args)
    if args.dry_run:
        print(describe(plan))
        return 0
    from sptune.tracking import check_reachable

    out = output_dir_for(spec, args.output)
    check_output_dir(args, spec, out)
    if args.tracking_uri or spec.tracking.uri:
        check_reachable(args.tracking_uri or spec.tracking.uri)
    _with_ray(args, lambda: run_study(args, spec, data, plan, out))
    _maybe_report(out)
    return 0


def run_campaign(args: argparse.Namespace, raw: dict) -> int:
    """Validate every study of the campaign first, then run them one after another."""
    from sptune.campaign import expand, merge_results
    from sptune.tracking import check_reachable

    studies = expand(raw, Path(args.spec))
    prepared = []
    for study in studies:
        study_args = argparse.Namespace(
            **{**vars(args), "spec": str(study.spec_path), "overrides": [*study.overrides, *args.overrides]}
        )
        try:
            prepared.append((study, study_args, *prepare(study_args)))
        except SptuneError as err:
            raise type(err)(
                f"campaign study '{study.name}' ({study.spec_path.name}): {err.where}", err.problem, err.fix
            ) from None
    if args.dry_run:
        for study, _, _, _, plan in prepared:
            print(f"=== study {study.name} ===\n{describe(plan)}\n")
        return 0
    root = args.output or Path("runs") / f"{raw['campaign']}-{time.strftime('%Y%m%d-%H%M%S')}"
    for study, study_args, spec, _, _ in prepared:
        check_output_dir(study_args, spec, root / study.name)
    if args.tracking_uri:
        check_reachable(args.tracking_uri)

    def body() -> None:
        for study, study_args, spec, data, plan in prepared:
            print(f"[sptune] campaign {raw['campaign']}: study {study.name}", flush=True)
            run_study(study_args, spec, data, plan, root / study.name, campaign_root=root)
            _maybe_report(root / study.name)

    _with_ray(args, body)
    path = merge_results(root, studies, raw["campaign"])
    print(f"Campaign results: {path}")
    _maybe_report(root)
    return 0


def _maybe_report(out: Path) -> None:
    """Write the HTML fairness report next to the results (see sptune.report).

    The study's results are already safe on disk and in MLflow: a report failure is
    reported, with the command to retry, but does not fail the study."""
    from sptune.report import build_report

    try:
        print(f"Report: {build_report(out)}")
    except Exception as err:  # noqa: BLE001 - any report bug must not lose a finished study
        print(
            f"sptune: warning: the report could not be built ({type(err).__name__}: {err}); "
            f"retry with `python -m sptune.report {out}`",
            file=sys.stderr,
        )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        return run(args)
    except SptuneError as err:
        if args.debug:
            traceback.print_exc()
        print(f"sptune: error: {err}", file=sys.stderr)
        return err.exit_code


if __name__ == "__main__":
    sys.exit(main())
