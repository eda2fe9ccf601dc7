"""`python -m sptune.jobs`: submit studies to a Ray cluster as Ray jobs, and list, watch and stop them.

    python -m sptune.jobs submit SPEC --output /ABS/DIR [--set K=V ...] --address http://HEAD:8265
    python -m sptune.jobs list | status ID | logs ID [--follow] | stop ID

The address is the head's dashboard (job server), or RAY_ADDRESS when it is an http:// URL.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from sptune.errors import SptuneError, cli_exit_code
from sptune.jobs import service
from sptune.jobs.staging import META_OUTPUT, META_STUDY, META_URI, JobRequest, stage

DEFAULT_ADDRESS = "http://127.0.0.1:8265"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    common = argparse.ArgumentParser(add_help=False)  # every command takes them, after its name
    common.add_argument("--address", help="the head's job server (default: RAY_ADDRESS if http://, "
                        f"else {DEFAULT_ADDRESS})")
    common.add_argument("--debug", action="store_true", help="show tracebacks")
    p = argparse.ArgumentParser(prog="python -m sptune.jobs", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)

    def add(name: str, text: str) -> argparse.ArgumentParser:
        return sub.add_parser(name, help=text, parents=[common])

    s = add("submit", "check a spec here, then run it on the cluster as a Ray job")
    s.add_argument("spec_path", metavar="spec", type=Path, help="sweep spec or campaign YAML")
    s.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE")
    s.add_argument("--output", help="ABSOLUTE output directory on the head (or shared storage)")
    s.add_argument("--data-dir", help="the data directory as the head sees it")
    s.add_argument("--tracking-uri", help="MLflow tracking URI as the head sees it (no password in it)")
    s.add_argument("--storage", help="Tune storage every node sees (NFS path or s3://)")
    s.add_argument("--optuna-storage", metavar="URL", help="database for the Optuna searches (no password in it)")
    s.add_argument("--resume", action="store_true", help="continue the interrupted study in --output")
    s.add_argument("--spec-only", action="store_true",
                   help="check the spec without loading its data here (the data is only on the cluster)")
    for name, text in (("status", "the job's state and its MLflow run"), ("stop", "stop the job and its trials")):
        one = add(name, text)
        one.add_argument("job_id")
    status = sub.choices["status"]
    status.add_argument("--tracking-uri", help="reach MLflow here instead of the URI the job recorded")
    logs = add("logs", "the job's driver log")
    logs.add_argument("job_id")
    logs.add_argument("--follow", action="store_true", help="keep printing until the job ends")
    listing = add("list", "sptune's jobs on the cluster")
    listing.add_argument("--all", action="store_true", help="every Ray job, not only sptune's")
    return p.parse_args(argv)


def job_server(explicit: str | None) -> str:
    env = os.environ.get("RAY_ADDRESS", "")
    return explicit or (env if env.startswith(("http://", "https://")) else DEFAULT_ADDRESS)


def cmd_submit(args: argparse.Namespace, address: str) -> int:
    request = JobRequest(args.spec_path, tuple(args.overrides), args.output, args.data_dir, args.tracking_uri,
                         args.storage, args.optuna_storage, args.resume, args.spec_only)
    with tempfile.TemporaryDirectory(prefix="sptune-job-") as tmp:
        job = stage(request, Path(tmp))  # everything checked before the cluster hears of it
        client = service.connect(address)
        submitted = service.submit(client, job)
    print(f"Submitted {submitted} ({job.metadata[META_STUDY]}) to {address}")
    print(f"  carried: {', '.join(str(p) for p in job.carried)}")
    print(f"  output on the cluster: {job.metadata[META_OUTPUT]}; MLflow: {job.metadata[META_URI]}")
    print(f"  watch: python -m sptune.jobs --address {address} status|logs|stop {submitted}")
    return 0


def cmd_list(args: argparse.Namespace, address: str) -> int:
    rows = service.list_jobs(service.connect(address), every=args.all)
    print(f"{'SUBMISSION ID':<36} {'STATUS':<10} {'STUDY':<24} STARTED")
    for row in rows:
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(row.start_time / 1000)) if row.start_time else "-"
        print(f"{row.submission_id:<36} {row.status:<10} {row.study:<24} {started}")
    return 0


def cmd_status(args: argparse.Namespace, address: str) -> int:
    info = service.job_info(service.connect(address), args.job_id)
    meta = info.metadata or {}
    print(f"Job {info.submission_id}: {info.status.value}" + (f" ({info.message.strip()})" if info.message else ""))
    print(f"  study: {meta.get(META_STUDY, '-')}, output: {meta.get(META_OUTPUT, '-')}")
    try:
        uri, runs = service.mlflow_runs(info, args.tracking_uri)
    except SptuneError as err:
        print(f"  MLflow: not reachable from here: {err}")
        return 0
    if not runs:
        print(f"  MLflow ({uri}): no parent run tagged with this job yet")
    for run in runs:
        print(f"  MLflow run {run['run_id']} ({run['name']}, {run['status']}) {run['url'] or uri}")
    return 0


def cmd_logs(args: argparse.Namespace, address: str) -> int:
    service.logs(service.connect(address), args.job_id, follow=args.follow)
    return 0


def cmd_stop(args: argparse.Namespace, address: str) -> int:
    client = service.connect(address)
    final = service.stop(client, args.job_id)
    print(f"Job {args.job_id}: {final}")
    if final == "STOPPED":
        try:
            print(f"  MLflow: {service.end_runs(service.job_info(client, args.job_id))} run(s) marked KILLED")
        except SptuneError as err:
            print(f"  MLflow: its runs could not be ended from here: {err}")
    return 0 if final in service.TERMINAL else 1


COMMANDS = {"submit": cmd_submit, "list": cmd_list, "status": cmd_status, "logs": cmd_logs, "stop": cmd_stop}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return cli_exit_code(lambda: COMMANDS[args.command](args, job_server(args.address)), args.debug)


if __name__ == "__main__":
    sys.exit(main())
