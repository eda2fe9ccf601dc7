"""`python -m sptune.sweep SPEC.yaml`: plan and run a fair SPT study (or a campaign of them).

This module only reads the command line and calls the Python API (`sptune.api`): `sptune.plan` for --dry-run,
`sptune.run` otherwise; `sptune.preflight` checks everything before anything starts (input errors exit with
status 2), `sptune.study.launch` runs what it made ready.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from sptune.api.running import plan
from sptune.api.running import run as run_study
from sptune.errors import StudyInterrupted, StudyStopped, cli_exit_code


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m sptune.sweep", description=__doc__.splitlines()[0])
    p.add_argument("spec_path", metavar="spec", type=Path,
                   help="sweep spec or campaign YAML (see search_spaces/ and sweeps/)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override a spec field, e.g. --set finetune.epochs=5 (repeatable)")
    p.add_argument("--output", type=Path, help="study output directory (default runs/<name>-<time>)")
    p.add_argument("--data-dir", help="where downloaded data lives (or SPTUNE_DATA_DIR)")
    p.add_argument("--tracking-uri", help="MLflow tracking URI (default: SQLite in the output directory)")
    p.add_argument("--address", default=None, help="Ray cluster address (default: RAY_ADDRESS or local)")
    p.add_argument("--storage", help="Tune storage path or URI (default OUTPUT/ray_results; must be shared "
                   "storage, e.g. NFS or s3://, on a multi-node cluster)")
    p.add_argument("--optuna-storage", metavar="URL",
                   help="database for the Optuna searches, e.g. postgresql://USER@HOST:5432/DB (or "
                   "SPTUNE_OPTUNA_STORAGE; default SQLite OUTPUT/optuna.db); a password in it is never shown")
    p.add_argument("--resume", action="store_true", help="continue the interrupted study in --output DIR")
    p.add_argument("--dry-run", action="store_true", help="print the plan and exit without training")
    p.add_argument("--debug", action="store_true", help="show tracebacks")
    p.add_argument("--verbose", action="store_true",
                   help="also print Ray Tune's status and trial tables, Optuna's and Ray's INFO logs (default: "
                   "sptune's own lines, and the libraries' warnings and errors)")
    return p.parse_args(argv)


def api_options(args: argparse.Namespace) -> dict[str, Any]:
    """The keywords `sptune.run` and `sptune.plan` take (argparse's dests are their names)."""
    return {"overrides": tuple(args.overrides), "output": args.output, "data_dir": args.data_dir,
            "tracking_uri": args.tracking_uri, "address": args.address, "storage": args.storage,
            "optuna_storage": args.optuna_storage, "resume": args.resume}


def run(args: argparse.Namespace) -> int:
    if args.dry_run:
        print(plan(args.spec_path, **api_options(args)).text)
        return 0
    run_study(args.spec_path, verbose=args.verbose, **api_options(args))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Exit status: 0 done, 1 a failure while running, 2 bad input (nothing started), 74 stopped by a write fault
    (a full disk, a read-only folder, a quota), 75 stopped by a service outage that outlasted its client's
    retries, 130 / 143 stopped by SIGINT / SIGTERM (for each stop, what is saved and the command to resume are
    printed)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    try:
        return cli_exit_code(lambda: run(args), args.debug)
    except StudyInterrupted as stop:
        from sptune.study.interrupts import paragraph  # Ray is imported by then

        print(paragraph(stop, argv), file=sys.stderr, flush=True)
        return stop.exit_code
    except StudyStopped as stop:
        from sptune.study.interrupts import fault_paragraph

        print(fault_paragraph(stop, argv, getattr(stop, "log", None)), file=sys.stderr, flush=True)
        return stop.exit_code


if __name__ == "__main__":
    sys.exit(main())
