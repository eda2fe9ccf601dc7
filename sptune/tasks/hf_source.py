"""Where the ``hf`` task's dataset comes from, and which of its rows each split takes.

``task.source`` is one of:

- a ``save_to_disk`` folder (``datasets.load_from_disk``; a lone ``Dataset`` is split ``train``);
- a data file or a folder of them (``.parquet``, ``.arrow``, ``.csv``, ``.json``, ``.jsonl``), a local path or any
  fsspec URI ``datasets`` takes; a folder is read as ``datasets.load_dataset(folder)`` reads it (split names from
  the file names);
- ``{parquet|arrow|csv|json: FILES}``, FILES a path, a list, or a mapping of split name to path(s): the
  arguments of ``datasets.load_dataset(<builder>, data_files=FILES)``;
- otherwise a hub id, read through `sptune.tasks.hub` (the user's Hugging Face cache; ``HF_HUB_OFFLINE``).

Relative paths are read under ``--data-dir`` when one is given, else under the working directory. A local source
never reaches the hub.

``task.splits`` maps ``train`` / ``validation`` / ``test`` to split names in ``datasets``' own syntax (``train``,
``train[:90%]``, ``train[5000:]``); without a validation split, ``validation_fraction`` of the training rows is
carved out with the spec's seed. Two roles that take the same rows are refused.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sptune.errors import DataError, SpecError
from sptune.tasks.base import MIN_TRAIN_ROWS, seeded_permutation
from sptune.tasks.hub import OFFLINE_FIX, hub_problem, load_hub_dataset

FORMATS = {"parquet": (".parquet",), "arrow": (".arrow",), "csv": (".csv",), "json": (".json", ".jsonl")}
SUFFIXES = {suffix: builder for builder, suffixes in FORMATS.items() for suffix in suffixes}
ROLES = ("train", "validation", "test")
# A dataset's validation split under the names hubs use for it, taken when task.splits names none.
VALIDATION_NAMES = ("validation", "valid", "val", "dev")
SOURCE_FIX = (
    "set task.source to a save_to_disk folder, a .parquet/.arrow/.csv/.json/.jsonl file or folder (a path "
    "or an fsspec URI), {parquet: [FILE, ...]} (or arrow, csv, json; a mapping of split to files names the "
    "splits), or a hub id in your Hugging Face cache"
)


@dataclass(frozen=True)
class Opened:
    """A source opened: ``splits`` split name -> ``datasets.Dataset`` (memory-mapped), ``where`` as results say it."""

    splits: dict[str, Any]
    where: str


def _is_uri(text: str) -> bool:
    return "://" in text


def _local(text: str, base: Path) -> Path:
    path = Path(text).expanduser()
    return path if path.is_absolute() else base / path


def _looks_local(text: str) -> bool:
    """Written as a path, not a hub id: refused as missing rather than asked of the hub."""
    return text.startswith((".", "/", "~")) or Path(text).suffix in SUFFIXES


def _datasets():
    import datasets  # here: a slow import, needed only by this task

    datasets.disable_progress_bars()
    return datasets


def _read_error(where: str, err: Exception) -> DataError:
    return DataError(f"task.source {where}", f"could not be read by datasets ({hub_problem(err)})", SOURCE_FIX)


def _as_dict(loaded: Any) -> dict[str, Any]:
    return dict(loaded) if isinstance(loaded, Mapping) else {"train": loaded}


def _files(value: Any, base: Path) -> Any:
    """data_files with local paths made absolute (URIs kept)."""
    if isinstance(value, str):
        return value if _is_uri(value) else str(_local(value, base))
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return [_files(v, base) for v in value]
    if isinstance(value, dict) and value and all(isinstance(k, str) for k in value):
        return {split: _files(v, base) for split, v in value.items()}
    raise SpecError(
        "task.source",
        f"data files {value!r} are not a path, a list of paths or a mapping of split names to paths",
        SOURCE_FIX,
    )


def _missing_files(files: Any) -> list[str]:
    flat = (
        [files]
        if isinstance(files, str)
        else files
        if isinstance(files, list)
        else [f for v in files.values() for f in ([v] if isinstance(v, str) else v)]
    )
    return [f for f in flat if not _is_uri(f) and not Path(f).exists()]


def _open_files(builder: str, files: Any) -> Opened:
    missing = _missing_files(files)
    if missing:
        raise DataError(f"task.source {missing[0]}", "no such file", SOURCE_FIX)
    try:
        return Opened(_as_dict(_datasets().load_dataset(builder, data_files=files)), f"{builder} files {files}")
    except (DataError, SpecError):
        raise
    except Exception as err:  # any reader failure: the file is not what its name says
        raise _read_error(str(files), err) from err


def _open_folder(folder: Path) -> Opened:
    datasets = _datasets()
    try:
        if (folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file():
            return Opened(_as_dict(datasets.load_from_disk(str(folder))), f"save_to_disk folder {folder}")
        return Opened(_as_dict(datasets.load_dataset(str(folder))), f"data files in {folder}")
    except Exception as err:  # any reader failure: not a dataset folder
        raise _read_error(str(folder), err) from err


def open_source(source: Any, data_dir: Path | None, subset: str | None = None) -> Opened:
    """The dataset ``task.source`` names, split by split (see the module's docstring)."""
    base = data_dir if data_dir is not None else Path(os.getcwd())
    if isinstance(source, dict):
        if len(source) != 1 or next(iter(source)) not in FORMATS:
            raise SpecError(
                "task.source",
                f"a mapping must have one key, the file format ({', '.join(FORMATS)}); got {sorted(source)}",
                SOURCE_FIX,
            )
        builder, files = next(iter(source.items()))
        return _open_files(builder, _files(files, base))
    if not isinstance(source, str) or not source.strip():
        raise SpecError("task.source", f"is {source!r}: say where the dataset is", SOURCE_FIX)
    if _is_uri(source):
        builder = SUFFIXES.get(Path(source.split("?")[0]).suffix)
        if builder is None:
            raise SpecError("task.source", f"URI {source} does not end in {', '.join(SUFFIXES)}", SOURCE_FIX)
        return _open_files(builder, source)
    path = _local(source, base)
    if path.is_dir():
        return _open_folder(path)
    if path.is_file():
        if path.suffix not in SUFFIXES:
            raise DataError(
                f"task.source {path}", f"is not a data file datasets reads ({', '.join(SUFFIXES)})", SOURCE_FIX
            )
        return _open_files(SUFFIXES[path.suffix], str(path))
    if _looks_local(source):
        raise DataError(
            f"task.source {path}", "no such file or folder (a path is never looked up on the hub)", SOURCE_FIX
        )
    return _open_hub(source, path, subset)


def _open_hub(repo_id: str, path: Path, subset: str | None) -> Opened:
    try:
        loaded = load_hub_dataset(repo_id, **({"name": subset} if subset else {}))
    except Exception as err:  # any hub failure means "not available"
        raise DataError(
            f"task.source {repo_id}",
            f"is no local file or folder ({path} does not exist), and the "
            f"hub dataset could not be loaded ({hub_problem(err)})",
            f"{SOURCE_FIX}; {OFFLINE_FIX}",
        ) from err
    return Opened(_as_dict(loaded), f"hf:{repo_id}" + (f" ({subset})" if subset else ""))


# ----------------------------------------------------------------------------- splits
@dataclass(frozen=True)
class Part:
    """One role's rows: ``(split name, row indices)`` pieces of the opened dataset, and how the spec wrote it."""

    pieces: tuple[tuple[str, np.ndarray], ...]
    written: str

    def __len__(self) -> int:
        return sum(len(rows) for _, rows in self.pieces)


def _role_names(opened: Opened, splits: Any) -> dict[str, str | None]:
    if splits is None:
        splits = {}
    if not isinstance(splits, dict) or not all(isinstance(v, str) for v in splits.values()):
        raise SpecError(
            "task.splits",
            f"is {splits!r}: expected a mapping of {', '.join(ROLES)} to split names",
            "write e.g. splits: {train: train, test: test} (validation: carved from train if absent)",
        )
    unknown = sorted(set(splits) - set(ROLES))
    if unknown:
        raise SpecError(
            f"task.splits.{unknown[0]}",
            f"is not a role (roles: {', '.join(ROLES)})",
            "name the splits for train, validation and test",
        )
    default_val = next((n for n in VALIDATION_NAMES if n in opened.splits), None)
    return {
        "train": splits.get("train", "train"),
        "validation": splits.get("validation", default_val),
        "test": splits.get("test", "test"),
    }


def _part(opened: Opened, role: str, written: str) -> Part:
    from datasets.arrow_reader import ReadInstruction

    sizes = {name: len(ds) for name, ds in opened.splits.items()}
    fix = f"set task.splits.{role} to one of the splits ({', '.join(sizes)}), optionally sliced, e.g. train[:90%]"
    try:
        pieces = ReadInstruction.from_spec(written).to_absolute(sizes)
    except (ValueError, KeyError, AssertionError) as err:
        problem = str(err).splitlines()[0][:200] if str(err) else type(err).__name__
        raise SpecError(
            f"task.splits.{role}", f"'{written}' is not a split of {opened.where} ({problem})", fix
        ) from err
    part = Part(tuple((p.splitname, np.arange(p.from_, p.to)) for p in pieces), written)
    if not len(part):
        raise SpecError(f"task.splits.{role}", f"'{written}' holds no rows", fix)
    return part


def _overlap(a: Part, b: Part) -> tuple[str, int] | None:
    for name_a, rows_a in a.pieces:
        for name_b, rows_b in b.pieces:
            common = np.intersect1d(rows_a, rows_b) if name_a == name_b else ()
            if len(common):
                return name_a, len(common)
    return None


def choose_parts(opened: Opened, splits: Any, validation_fraction: float, seed: int) -> dict[str, Part]:
    """train / validation / test rows; validation carved from train (``seed``) when no split is named for it.
    Refuses a split that does not exist and two roles sharing rows."""
    names = _role_names(opened, splits)
    parts = {role: _part(opened, role, written) for role, written in names.items() if written is not None}
    roles = list(parts)
    for i, first in enumerate(roles):
        for second in roles[i + 1 :]:
            shared = _overlap(parts[first], parts[second])
            if shared:
                raise SpecError(
                    f"task.splits.{second}",
                    f"'{parts[second].written}' shares {shared[1]} rows of "
                    f"split '{shared[0]}' with {first} ('{parts[first].written}')",
                    "give each role rows of its own, e.g. train: train[:90%], validation: train[90%:]",
                )
    if "validation" not in parts:
        parts["train"], parts["validation"] = _carve(parts["train"], validation_fraction, seed)
    return parts


def _carve(train: Part, fraction: float, seed: int) -> tuple[Part, Part]:
    rows = [(name, r) for name, rows in train.pieces for r in rows]
    n_val = int(round(fraction * len(rows)))
    if not 1 <= n_val <= len(rows) - MIN_TRAIN_ROWS:
        raise SpecError(
            "task.validation_fraction",
            f"{fraction:g} of the {len(rows)} training rows is {n_val} "
            "validation rows, which leaves no validation or no training set",
            "use a fraction that leaves rows on both sides, e.g. 0.1, or name a validation split in task.splits",
        )
    order = seeded_permutation(len(rows), seed)
    picked = {"validation": np.sort(order[:n_val]), "train": np.sort(order[n_val:])}
    out = []
    for role in ("train", "validation"):
        pieces: dict[str, list[int]] = {}
        for i in picked[role]:
            name, row = rows[i]
            pieces.setdefault(name, []).append(int(row))
        written = train.written if role == "train" else f"{fraction:g} of {train.written} (seed {seed})"
        out.append(Part(tuple((n, np.asarray(r)) for n, r in pieces.items()), written))
    return out[0], out[1]


def rows_of(opened: Opened, part: Part) -> Any:
    """The part's rows as one ``datasets.Dataset`` (no copy of the data: an index mapping)."""
    datasets = _datasets()
    pieces = [opened.splits[name].select(rows) for name, rows in part.pieces]
    return pieces[0] if len(pieces) == 1 else datasets.concatenate_datasets(pieces)
