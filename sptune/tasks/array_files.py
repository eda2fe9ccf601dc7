"""Task ``arrays``: your own arrays, in an ``.npz`` or a folder of ``.npy`` files, in one layout.

    x_train, y_train         required
    x_val, y_val             optional (without them, validation_fraction of train is carved with the spec's seed)
    x_test, y_test           required; read only in the final evaluation

``y_*``: one whole-number label per row. ``x_*``: option ``input`` says what it holds:

- ``tokens``: whole-number ids, (N, L), or (N, 2, L) for a paired task; shifted past the specials ``<pad>``,
  ``<mask>``, ``<unk>``; ``pad_id`` names your padding id (it becomes ``<pad>``); ``vocab_size`` (default: one more
  than the largest training id) bounds them, and ids beyond it read as ``<unk>``.
- ``continuous``: whole-number levels 0..levels-1 (e.g. uint8 pixels), (N, L), or (N, H, W) images read row-major;
  ``levels`` defaults to one more than the largest training value.

``task.path`` is the file or folder (relative to ``--data-dir`` when given, else the working directory); without
it, ``--data-dir`` itself. The dry run reads only the arrays' headers (shapes and dtypes), never the test values.
"""

from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sptune.errors import DataError, SpecError
from sptune.tasks.arrays import limit_train
from sptune.tasks.base import ArraySplit, TaskInfo, TaskSplits, carve_validation
from sptune.tasks.contract import check_arrays
from sptune.tasks.hf_columns import SPECIALS, UNK
from sptune.tasks.option_rules import Option
from sptune.tasks.registry import TaskDef, TaskRequest, register

REQUIRED = ("x_train", "y_train", "x_test", "y_test")
OPTIONAL = ("x_val", "y_val")
LAYOUT = "x_train, y_train, optional x_val, y_val, and x_test, y_test"
FIX = (
    "write it with numpy.savez(path, x_train=..., y_train=..., x_test=..., y_test=...) (x_val, y_val optional), "
    "or a folder of x_train.npy, y_train.npy, ..."
)


@dataclass(frozen=True)
class Header:
    shape: tuple[int, ...]
    dtype: np.dtype


class ArrayFiles:
    """The named arrays of one ``.npz`` or folder of ``.npy`` files: headers without reading, values on demand."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.headers = self._headers()

    def _headers(self) -> dict[str, Header]:
        if self.path.is_dir():
            found = {}
            for file in sorted(self.path.glob("*.npy")):
                array = self._open_npy(file)
                found[file.stem] = Header(array.shape, array.dtype)
            return found
        try:
            with zipfile.ZipFile(self.path) as archive:
                return {
                    name.removesuffix(".npy"): self._zip_header(archive, name)
                    for name in archive.namelist()
                    if name.endswith(".npy")
                }
        except (OSError, ValueError, zipfile.BadZipFile, EOFError):
            raise DataError(
                str(self.path), "is truncated or corrupt: not a readable .npz archive of .npy arrays", FIX
            ) from None

    @staticmethod
    def _zip_header(archive: zipfile.ZipFile, name: str) -> Header:
        with archive.open(name) as f:
            version = np.lib.format.read_magic(f)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, _, dtype = read(f)
        return Header(tuple(shape), np.dtype(dtype))

    def _open_npy(self, file: Path) -> np.ndarray:
        try:
            return np.load(file, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError, EOFError):
            raise DataError(str(file), "is truncated or corrupt: not a readable .npy array", FIX) from None

    def read(self, key: str) -> np.ndarray:
        if self.path.is_dir():
            return np.asarray(self._open_npy(self.path / f"{key}.npy"))
        try:
            with np.load(self.path, allow_pickle=False) as npz:
                return npz[key]
        except (OSError, ValueError, EOFError, zipfile.BadZipFile):
            raise DataError(f"{self.path} ({key})", "is truncated or corrupt", FIX) from None


def _where(request: TaskRequest) -> Path:
    given = request.option("path")
    if given is None:
        if request.data_dir is None:
            raise SpecError(
                "task.path",
                "task arrays needs a file or folder",
                "set task.path to an .npz file or a folder of .npy files, or pass --data-dir with one",
            )
        return request.data_dir
    path = Path(given).expanduser()
    base = request.data_dir if request.data_dir is not None else Path(os.getcwd())
    path = path if path.is_absolute() else base / path
    if not path.exists():
        raise DataError(f"task.path {path}", "no such file or folder", FIX)
    return path


def _check_layout(files: ArrayFiles, input_kind: str | None) -> None:
    """Refuse a missing, unpaired or unknown array, or shapes and dtypes that do not fit together."""
    where, keys = str(files.path), set(files.headers)
    if input_kind is None:
        raise SpecError(
            "task.input",
            "say what x holds",
            "set task.input: tokens (whole-number ids) or continuous (whole-number levels, e.g. uint8 pixels)",
        )
    missing = [k for k in REQUIRED if k not in keys] + [k for k in OPTIONAL if k not in keys and keys & set(OPTIONAL)]
    if missing:
        raise DataError(
            where, f"has no array {missing[0]} (has {', '.join(sorted(keys)) or 'none'}); the layout is {LAYOUT}", FIX
        )
    unknown = sorted(keys - set(REQUIRED) - set(OPTIONAL))
    if unknown:
        raise DataError(
            where, f"holds array {unknown[0]}, which is not in the layout ({LAYOUT})", f"rename or drop it; {FIX}"
        )
    splits = [s for s in ("train", "val", "test") if f"x_{s}" in keys]
    first = files.headers["x_train"]
    for split in splits:
        x, y = files.headers[f"x_{split}"], files.headers[f"y_{split}"]
        if len(y.shape) != 1 or y.dtype.kind not in "iu":
            raise DataError(
                f"{where} (y_{split})",
                f"has shape {y.shape} and dtype {y.dtype}: expected one whole-number label per row",
                FIX,
            )
        if len(x.shape) < 2 or x.shape[0] != y.shape[0]:
            raise DataError(
                f"{where} (x_{split})", f"has shape {x.shape} for {y.shape[0]} labels: expected one row per label", FIX
            )
        if x.shape[1:] != first.shape[1:]:
            raise DataError(
                f"{where} (x_{split})", f"rows of shape {x.shape[1:]}, but x_train's are {first.shape[1:]}", FIX
            )
        if x.dtype.kind not in "iu":
            raise DataError(
                f"{where} (x_{split})",
                f"dtype {x.dtype}: {input_kind} inputs are whole numbers",
                "store token ids as integers, or continuous values quantised to levels, e.g. "
                "np.rint(x * 255).astype(np.uint8)",
            )
    if input_kind == "tokens" and not (len(first.shape) == 2 or (len(first.shape) == 3 and first.shape[1] == 2)):
        raise DataError(f"{where} (x_train)", f"has shape {first.shape}: token inputs are (N, L) or (N, 2, L)", FIX)
    if input_kind == "continuous" and len(first.shape) > 3:
        raise DataError(
            f"{where} (x_train)", f"has shape {first.shape}: continuous inputs are (N, L) or (N, H, W)", FIX
        )


def _files(request: TaskRequest) -> ArrayFiles:
    path = _where(request)
    if path.is_file() and path.suffix != ".npz":
        raise DataError(f"task.path {path}", "is neither an .npz file nor a folder of .npy files", FIX)
    files = ArrayFiles(path)
    _check_layout(files, request.option("input"))
    return files


def check_available(request: TaskRequest) -> None:
    _files(request)


@dataclass(frozen=True)
class Mapping:
    """How raw values become task values, fixed by the training rows: token ids or levels."""

    input_kind: str
    size: int  # vocab_size (the user's ids) or levels
    pad_id: int | None

    def apply(self, x: np.ndarray, where: str) -> np.ndarray:
        if self.input_kind == "continuous":
            if x.size and (int(x.min()) < 0 or int(x.max()) >= self.size):
                raise DataError(
                    where,
                    f"values run {int(x.min())}..{int(x.max())}, outside levels 0..{self.size - 1}",
                    "set task.levels to cover every split, or quantise the values",
                )
            return x.reshape(len(x), -1)
        ids = x.astype(np.int64) + len(SPECIALS)
        ids = np.where((ids >= self.size + len(SPECIALS)) | (ids < len(SPECIALS)), UNK, ids)
        if self.pad_id is not None:
            ids = np.where(x == self.pad_id, 0, ids)
        return ids


def _mapping(request: TaskRequest, x_train: np.ndarray) -> Mapping:
    kind = request.option("input")
    given = request.option("vocab_size" if kind == "tokens" else "levels")
    largest = int(x_train.max(initial=0))
    if given is not None and largest >= given:
        name = "vocab_size" if kind == "tokens" else "levels"
        raise DataError(
            f"x_train of {request.option('path') or request.data_dir}",
            f"holds {largest}, not below task.{name} {given}",
            f"raise task.{name} above {largest}, or leave it out to infer it",
        )
    return Mapping(kind, int(given) if given is not None else max(2, largest + 1), request.option("pad_id"))


def load(request: TaskRequest) -> TaskSplits:
    files = _files(request)
    where = str(files.path)

    def split(name: str, mapping: Mapping | None = None) -> tuple[np.ndarray, np.ndarray]:
        x, y = files.read(f"x_{name}"), files.read(f"y_{name}")
        return (mapping.apply(x, f"{where} (x_{name})") if mapping else x), y.astype(np.int64)

    x_train_raw, y_train = split("train")
    mapping = _mapping(request, x_train_raw)
    x_train = mapping.apply(x_train_raw, f"{where} (x_train)")
    if "x_val" in files.headers:
        train, val = ArraySplit(x_train, y_train), ArraySplit(*split("val", mapping))
    else:
        n_val = int(round(float(request.option("validation_fraction")) * len(y_train)))
        try:
            train, val = carve_validation(x_train, y_train, n_val, request.seed)
        except SpecError as err:
            raise SpecError(
                "task.validation_fraction",
                err.problem,
                "use a fraction that leaves rows on both sides, e.g. 0.1, or write x_val and y_val",
            ) from None
    classes = request.option("num_classes") or int(max(train.y.max(initial=0), val.y.max(initial=0))) + 1
    for name, part in (("train", train), ("val", val)):
        check_arrays(f"{where} (x_{name}, y_{name})", part.x, part.y, classes, fix=FIX)
    info = _info(request, mapping, files.headers["x_train"].shape, train.x.shape[-1], classes)
    details = {
        "source": where,
        "input": mapping.input_kind,
        "inferred": {
            "vocab_size" if mapping.input_kind == "tokens" else "levels": mapping.size,
            "num_classes": classes,
        },
        "validation": "x_val"
        if "x_val" in files.headers
        else f"{request.option('validation_fraction'):g} of x_train (seed {request.seed})",
    }
    splits = TaskSplits(info, train, val, lambda: ArraySplit(*split("test", mapping)), source=where, details=details)
    return limit_train(splits, request.option("max_train"))


def _info(request: TaskRequest, mapping: Mapping, shape: tuple[int, ...], seq_len: int, classes: int) -> TaskInfo:
    if mapping.input_kind == "tokens":
        vocab = SPECIALS + tuple(str(i) for i in range(mapping.size))
        return TaskInfo(
            name="arrays",
            input_kind="tokens",
            seq_len=seq_len,
            num_classes=classes,
            vocab_size=len(vocab),
            pad_id=0,
            mask_id=1,
            paired=len(shape) == 3,
            vocab=vocab,
        )
    side = shape[1] if len(shape) == 3 and shape[1] == shape[2] else 0
    return TaskInfo(
        name="arrays",
        input_kind="continuous",
        seq_len=seq_len,
        num_classes=classes,
        levels=mapping.size,
        image_side=side,
    )


register(
    TaskDef(
        name="arrays",
        description=f"your own arrays: an .npz or a folder of .npy files ({LAYOUT})",
        defaults={
            "path": None,
            "input": None,
            "vocab_size": None,
            "levels": None,
            "pad_id": None,
            "num_classes": None,
            "validation_fraction": 0.1,
            "max_train": None,
        },
        load=load,
        check_available=check_available,
        rules={
            "path": Option(str, nullable=True, null_means="--data-dir itself"),
            "input": Option(str, nullable=True, null_means="not set: the task asks", choices=("tokens", "continuous")),
            "vocab_size": Option(int, low=1, nullable=True, null_means="one more than the largest training id"),
            "levels": Option(int, low=2, nullable=True, null_means="one more than the largest training value"),
            "pad_id": Option(int, low=0, nullable=True, null_means="no padding id"),
            "num_classes": Option(int, low=2, nullable=True, null_means="one more than the largest label"),
            "validation_fraction": Option(float, low=0, high=1, low_open=True),
        },
    )
)
