"""Data preparation CLI: ``python -m sptune.data``.

CLI::

    python -m sptune.data prepare TASK [--data-dir DIR] [--set KEY=VALUE ...] [--force]
    python -m sptune.data info TASK [--data-dir DIR] [--json]
    python -m sptune.data info [--json]     (every task and model family, built-in or plug-in, and where from)
    python -m sptune.data generate {listops,pathfinder,retrieval,bits} --out DIR --seed S ...

``prepare`` fills the prepared-array cache (`sptune.tasks.prepared`) under ``SPTUNE_CACHE_DIR``;
generated datasets are cached beside it (`sptune.tasks.cache`). The readers, generators and
caches all live in `sptune.tasks`; this module only parses arguments and prints.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from sptune.errors import DataError, SptuneError
from sptune.spec import plugin_refs
from sptune.spec.plugin_refs import BUILT_IN_FAMILIES
from sptune.tasks import holdout
from sptune.tasks.base import TaskSplits
from sptune.tasks.bits import generate_bits_files
from sptune.tasks.listops import generate_listops
from sptune.tasks.option_rules import SEED, Option, check_order
from sptune.tasks.pathfinder_generator import generate_pathfinder
from sptune.tasks.prepared import preparing
from sptune.tasks.registry import (
    TaskRequest,
    check_task,
    get_task,
    load_task,
    resolve_data_dir,
    task_names,
    task_origin,
)
from sptune.tasks.retrieval import generate_retrieval
from sptune.tasks.skipped import skipped_counts
from sptune.tasks.text import generate_synthetic_imdb

DESCRIPTION = "Data preparation: the on-disk caches every task shares, and the ``python -m sptune.data`` CLI."


def _request(task: str, data_dir: str | None, sets: list[str]) -> TaskRequest:
    options = {}
    for item in sets:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise DataError(f"--set {item}", "expected KEY=VALUE", "write e.g. --set max_len=512")
        options[key] = _parse_value(value)
    return TaskRequest(task, options, 0, resolve_data_dir(data_dir))


def _parse_value(text: str) -> Any:
    if text in ("None", "none", "null"):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text  # a bare string such as a path


def _load(request: TaskRequest) -> TaskSplits:
    check_task(request)
    return load_task(request)


def cmd_prepare(args: argparse.Namespace) -> int:
    request = _request(args.task, args.data_dir, args.set)
    with preparing(force=args.force):
        splits = _load(request)
    source, marker, directory = splits.source.partition(" [prepared: ")
    if not marker:  # embedded or in-memory tasks load fast and keep no array cache
        print(f"{args.task}: nothing to prepare ({source})")
        return 0
    print(f"{args.task}: prepared arrays in {directory.rstrip(']')}")
    print(f"source: {source}")
    return 0


def _balance(y: np.ndarray) -> dict[str, float]:
    values, counts = np.unique(np.asarray(y), return_counts=True)
    return {str(int(v)): round(float(c) / max(1, len(y)), 4) for v, c in zip(values, counts, strict=True)}


def task_info(request: TaskRequest) -> dict[str, Any]:
    """Sizes, lengths and label balance of every split of a task."""
    splits = _load(request)
    # `info` is an inspection command: it counts rows and label frequencies of the test split
    # and computes no model metric, so opening the seal here cannot leak into a selection.
    with holdout.final_evaluation():
        test = splits.test
    parts = {"train": splits.train, "val": splits.val, "test": test}
    info = splits.info
    return {
        "task": info.name,
        "source": splits.source,
        "input_kind": info.input_kind,
        "seq_len": info.seq_len,
        "num_classes": info.num_classes,
        "vocab_size": info.vocab_size,
        "paired": info.paired,
        "splits": {k: len(v) for k, v in parts.items()},
        "label_balance": {k: _balance(v.y) for k, v in parts.items()},
        "skipped": skipped_counts(info.name),
        **({"details": splits.details} if splits.details else {}),
    }


def _describe_task(name: str) -> str:
    try:
        description = get_task(name).description
    except SptuneError as err:  # a broken plug-in is listed with its problem, not a failed listing
        description = f"(does not load: {err.problem})"
    return description.strip().splitlines()[0] if description.strip() else ""


def catalogue() -> dict[str, list[dict[str, str]]]:
    """Every task and model family a spec may name, built-in or plug-in, with where each comes from."""
    tasks = [{"name": n, "origin": task_origin(n), "description": _describe_task(n)} for n in task_names()]
    plugins = plugin_refs.installed(plugin_refs.MODEL_GROUP)
    families = [{"name": n, "origin": "built-in"} for n in BUILT_IN_FAMILIES]
    families += [{"name": n, "origin": plugin_refs.entry_point_origin(ep)} for n, ep in sorted(plugins.items())
                 if n not in BUILT_IN_FAMILIES]
    return {"tasks": tasks, "model_families": families}


def _print_catalogue(as_json: bool) -> int:
    found = catalogue()
    if as_json:
        print(json.dumps(found))
        return 0
    print("tasks (task: {name: NAME}, or a plug-in's import path module:attr):")
    for t in found["tasks"]:
        print(_listed(t["name"], t["origin"], t["description"]))
    print("model families (model: {family: NAME}, or a plug-in's import path module:attr):")
    for f in found["model_families"]:
        print(_listed(f["name"], f["origin"], ""))
    return 0


def _listed(name: str, origin: str, description: str) -> str:
    line = f"  {name:<12} {'built-in' if origin == 'built-in' else 'plug-in':<9} {description}".rstrip()
    return line if origin == "built-in" else f"{line}\n  {'':<12} {'':<9} from {origin}"


def cmd_info(args: argparse.Namespace) -> int:
    if args.task is None:
        return _print_catalogue(args.json)
    result = {**task_info(_request(args.task, args.data_dir, args.set)), "origin": task_origin(args.task)}
    if args.json:
        print(json.dumps(result))
        return 0
    for key, value in result.items():
        print(f"{key:>14}: {value}")
    return 0


# Each generate flag's rule (as its task option's: sptune.tasks.option_rules); the seed any numpy accepts.
_GENERATE_RULES = {"seed": SEED, **{flag: Option(int, low=1) for flag in (
    "n_train", "n_val", "n_test", "n", "min_len", "max_len", "max_depth", "max_args", "resolution", "contour_length",
    "n_bits")}}


def _check_generate_args(args: argparse.Namespace) -> Path:
    """The --out folder, once every flag is in range (a count of 0 would write empty files, a resolution of 0 divide
    by it) and --out is not a file."""
    for name, rule in _GENERATE_RULES.items():
        value = getattr(args, name)
        found = rule.problem(value) if value is not None else None
        if found:
            flag = f"--{name.replace('_', '-')}"
            raise DataError(f"{flag} {value}", f"{found}; {flag} takes {rule.allowed()}",
                            f"pass {flag} with {rule.allowed()}, or leave it out for its default")
    check_order({f"gen_{k}": getattr(args, k) for k in ("min_len", "max_len") if getattr(args, k) is not None},
                prefix="")
    out = Path(args.out).expanduser()
    if out.exists() and not out.is_dir():
        raise DataError(f"--out {args.out}", "is a file, not a folder", "pass a folder (it is created if missing)")
    return out


def cmd_generate(args: argparse.Namespace) -> int:
    out = _check_generate_args(args)
    counts = {"n_train": args.n_train, "n_val": args.n_val, "n_test": args.n_test}
    counts = {k: v for k, v in counts.items() if v is not None}
    if args.kind == "listops":
        lengths = {"min_len": args.min_len, "max_len": args.max_len}
        extra = {k: v for k, v in {**lengths, "max_depth": args.max_depth, "max_args": args.max_args}.items()
                 if v is not None}
        written = generate_listops(out, args.seed, **{**_default_counts(), **counts}, **extra)
    elif args.kind == "pathfinder":
        n = args.n or (sum(counts.values()) if counts else 2000)
        shape = {"resolution": args.resolution, "contour_length": args.contour_length}
        extra = {k: v for k, v in shape.items() if v is not None}
        written = generate_pathfinder(out, args.seed, n, **extra).directory
    elif args.kind == "text":
        # SYNTHETIC reviews in the aclImdb layout (offline smoke runs; not IMDb, and labelled so).
        sizes = {"n_train": counts.get("n_train", 2000), "n_test": counts.get("n_test", 500)}
        written = generate_synthetic_imdb(out, args.seed, **sizes)
    elif args.kind == "retrieval":
        written = generate_retrieval(out, args.seed, **{**_default_counts(), **counts})
    else:
        extra = {"n_bits": args.n_bits} if args.n_bits is not None else {}
        written = generate_bits_files(out, args.seed, **counts, **extra)
    print(f"wrote {written}; read it back with --data-dir {out}")
    return 0


def _default_counts() -> dict[str, int]:
    return {"n_train": 2000, "n_val": 300, "n_test": 300}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m sptune.data", description=DESCRIPTION)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, func, helptext in (
        ("prepare", cmd_prepare, "load a task once and cache its arrays for memory-mapped loads"),
        ("info", cmd_info, "split sizes, sequence length, vocabulary size, label balance; without TASK: every "
         "task and model family, built-in or plug-in"),
    ):
        p = sub.add_parser(name, help=helptext)
        if name == "info":  # without a task: every task and model family, built-in or plug-in
            p.add_argument("task", nargs="?", default=None)
        else:
            p.add_argument("task")
        p.add_argument("--data-dir", default=None, help="root of the data (default: $SPTUNE_DATA_DIR)")
        p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="task option")
        if name == "info":
            p.add_argument("--json", action="store_true", help="print one JSON object")
        else:
            p.add_argument("--force", action="store_true",
                           help="prepare anew even where a prepared cache for these sources exists")
        p.set_defaults(func=func)
    g = sub.add_parser("generate", help="write an offline dataset in the official layout")
    g.add_argument("kind", choices=["listops", "pathfinder", "retrieval", "bits", "text"])
    g.add_argument("--out", required=True)
    g.add_argument("--seed", type=int, default=0)
    for flag in ("--n-train", "--n-val", "--n-test", "--n", "--min-len", "--max-len", "--max-depth",
                 "--max-args", "--resolution", "--contour-length", "--n-bits"):
        g.add_argument(flag, type=int, default=None)
    g.set_defaults(func=cmd_generate)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except SptuneError as err:
        print(str(err), file=sys.stderr)
        return err.exit_code


if __name__ == "__main__":
    sys.exit(main())
