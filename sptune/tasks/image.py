"""LRA "Image": CIFAR-10 in grayscale, 1,024 pixels row-major, 45k/5k/10k.

Sources, in order: a local ``.npz`` (``--data-dir`` / ``SPTUNE_DATA_DIR``) holding uint8
arrays ``x_train, y_train, x_test, y_test``; else the official python-format release
``cifar-10-batches-py/`` (``data_batch_1..5``, ``test_batch``) under the data dir; else the
Hugging Face hub via ``datasets`` (when reachable or cached; never with a ``--data-dir`` of the user's own, and
refused at once without a network unless cached: `sptune.tasks.hub`). Images may be stored gray
(N, 1024) or RGB (N, 32, 32, 3).
"""

from __future__ import annotations

import functools
import pickle
import zipfile
from pathlib import Path

import numpy as np

from sptune.errors import DataError
from sptune.tasks.base import ArraySplit, TaskInfo, TaskSplits, carve_validation
from sptune.tasks.contract import check_arrays
from sptune.tasks.hub import OFFLINE_FIX, hub_problem, load_hub_dataset
from sptune.tasks.option_rules import Option
from sptune.tasks.registry import TaskDef, TaskRequest, register

NPZ_NAMES = ("cifar10_gray.npz", "cifar10.npz")
HF_DATASET = "uoft-cs/cifar10"
SPLIT_SEED = 4321
REQUIRED_KEYS = ("x_train", "y_train", "x_test", "y_test")
SIDE = 32  # CIFAR-10's images: 32 x 32 pixels
NUM_CLASSES = 10
BATCHES_DIR = "cifar-10-batches-py"
BATCH_FILES = {"train": tuple(f"data_batch_{i}" for i in range(1, 6)), "test": ("test_batch",)}


def to_gray(x: np.ndarray) -> np.ndarray:
    """RGB (N, 32, 32, 3) -> LRA grayscale (N, 1024); gray inputs pass through."""
    if x.ndim == 2:
        return x.astype(np.uint8)
    if x.ndim == 4 and x.shape[-1] == 3:
        gray = np.rint(x[..., 0] * 0.299 + x[..., 1] * 0.587 + x[..., 2] * 0.114)
        return gray.reshape(len(x), -1).astype(np.uint8)
    if x.ndim == 3:
        return x.reshape(len(x), -1).astype(np.uint8)
    raise ValueError(f"cannot read images of shape {x.shape}")


def downsample(x: np.ndarray, resolution: int) -> np.ndarray:
    """Average-pool square gray images to resolution x resolution (CPU-scale studies)."""
    side = int(round(np.sqrt(x.shape[1])))
    if resolution == side:
        return x
    factor = side // resolution
    pooled = x.reshape(len(x), resolution, factor, resolution, factor).mean(axis=(2, 4))
    return np.rint(pooled).reshape(len(x), -1).astype(np.uint8)


def find_npz(data_dir: Path | None) -> Path | None:
    if data_dir is None:
        return None
    if data_dir.is_file() and data_dir.suffix == ".npz":
        return data_dir
    for name in NPZ_NAMES:
        if (data_dir / name).is_file():
            return data_dir / name
    return None


def find_batches(data_dir: Path | None) -> Path | None:
    if data_dir is None:
        return None
    for folder in (data_dir / BATCHES_DIR, data_dir):
        if (folder / BATCH_FILES["test"][0]).is_file() or (folder / BATCH_FILES["train"][0]).is_file():
            return folder
    return None


def _read_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One pickled batch of the official python-format release -> RGB (N, 32, 32, 3), labels.

    That release exists only as pickles, so unpickling is unavoidable for it. It is used solely
    on files the user placed in their own data dir under the official names, never on anything
    downloaded by sptune (the hub path goes through `datasets`).
    """
    try:
        with path.open("rb") as f:
            batch = pickle.load(f, encoding="bytes")
        data = np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
        labels = np.asarray(batch[b"labels"], dtype=np.int64)
    except FileNotFoundError as err:
        fix = f"extract cifar-10-python.tar.gz completely ({BATCHES_DIR}/data_batch_1..5, test_batch)"
        raise DataError(str(path), "CIFAR-10 batch file not found", fix) from err
    except (OSError, EOFError, pickle.UnpicklingError, KeyError, TypeError, ValueError) as err:
        raise DataError(str(path), f"not a readable CIFAR-10 python batch ({type(err).__name__}: {err})",
                        "re-download cifar-10-python.tar.gz and extract it again") from err
    if len(data) != len(labels):
        raise DataError(str(path), f"{len(data)} images but {len(labels)} labels", "re-extract the release")
    return data.transpose(0, 2, 3, 1), labels


def _read_batches(folder: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    parts = [_read_batch(folder / name) for name in BATCH_FILES[split]]
    return np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


_LOCAL_FIX = (f"pass --data-dir DIR (or set SPTUNE_DATA_DIR) to a folder with cifar10_gray.npz holding uint8 arrays "
              f"x_train, y_train, x_test, y_test, or with the extracted {BATCHES_DIR}/ (or use task name: hf on a "
              "local save_to_disk folder or parquet/arrow/csv/json files)")


def _missing_error(data_dir: Path | None, problem: str | None) -> DataError:
    """No local files; ``problem`` says why the hub copy could not be loaded (None: the hub was not asked, since
    --data-dir names a folder of the user's own)."""
    if data_dir is not None:
        return DataError(f"--data-dir {data_dir}", f"holds no {' or '.join(NPZ_NAMES)} and no {BATCHES_DIR}/ "
                         "(with --data-dir the Hugging Face hub is not asked)", _LOCAL_FIX)
    return DataError(
        "task image (CIFAR-10)",
        f"no --data-dir given, and the Hugging Face hub copy '{HF_DATASET}' could not be loaded ({problem})",
        f"{_LOCAL_FIX}; {OFFLINE_FIX}",
    )


_NPZ_FIX = "re-create it with numpy.savez(path, x_train=..., y_train=..., x_test=..., y_test=...) or re-download it"


def _corrupt(path: Path) -> DataError:
    # Not numpy's own message: for a file that is not a zip archive it advises loading it with allow_pickle.
    return DataError(str(path), "is truncated or corrupt: not a readable .npz archive of .npy arrays", _NPZ_FIX)


def _open_npz(path: Path) -> np.lib.npyio.NpzFile:
    try:
        npz = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError, zipfile.BadZipFile):
        raise _corrupt(path) from None
    if not isinstance(npz, np.lib.npyio.NpzFile):  # a single .npy array renamed .npz
        raise DataError(str(path), "holds one array, not the named arrays of an .npz archive", _NPZ_FIX)
    missing = [k for k in REQUIRED_KEYS if k not in npz.files]
    if missing:
        raise DataError(
            str(path),
            f"missing arrays {missing} (has {npz.files})",
            "write the file with numpy.savez(path, x_train=..., y_train=..., x_test=..., y_test=...)",
        )
    return npz


@functools.lru_cache(maxsize=2)
def _hub_arrays(split: str) -> tuple[np.ndarray, np.ndarray]:
    ds = load_hub_dataset(HF_DATASET, split=split)
    images = np.stack([np.asarray(img.convert("RGB")) for img in ds["img"]])
    return to_gray(images), np.asarray(ds["label"], dtype=np.int64)


def check_available(request: TaskRequest) -> None:
    path = find_npz(request.data_dir)
    if path is not None:
        _open_npz(path)
        return
    batches = find_batches(request.data_dir)
    if batches is not None:
        for name in BATCH_FILES["train"] + BATCH_FILES["test"]:
            if not (batches / name).is_file():  # a stat only: the test batch stays unopened
                raise DataError(str(batches / name), "CIFAR-10 batch file not found",
                                f"extract cifar-10-python.tar.gz completely ({BATCHES_DIR}/)")
        return
    if request.data_dir is not None:
        raise _missing_error(request.data_dir, None)
    try:
        _hub_arrays("train")
    except Exception as err:  # any hub failure means "not available": report both options
        raise _missing_error(None, hub_problem(err)) from err


def _read_split(request: TaskRequest, split: str) -> tuple[np.ndarray, np.ndarray]:
    path = find_npz(request.data_dir)
    if path is not None:
        npz = _open_npz(path)
        # NpzFile reads a member only when indexed: the test arrays stay unread until asked for.
        try:
            x, y = npz[f"x_{split}"], npz[f"y_{split}"]
        except (OSError, ValueError, EOFError, zipfile.BadZipFile):
            raise _corrupt(path) from None
        where = f"{path} (x_{split}, y_{split})"
    elif find_batches(request.data_dir) is not None:
        path = find_batches(request.data_dir)
        x, y = _read_batches(path, split)
        where = str(path)
    elif request.data_dir is not None:
        raise _missing_error(request.data_dir, None)
    else:
        try:
            x, y = _hub_arrays(split)
        except Exception as err:
            raise _missing_error(None, hub_problem(err)) from err
        where = f"hf:{HF_DATASET}"
    x = _gray_images(where, x)
    check_arrays(where, x, y, NUM_CLASSES, fix=_NPZ_FIX)
    return downsample(x, int(request.option("resolution"))), y.astype(np.int64)


def _gray_images(where: str, x: np.ndarray) -> np.ndarray:
    """The images as (N, 1024) gray rows, or a DataError naming the shape that is not CIFAR's."""
    shapes = f"(N, {SIDE * SIDE}) gray, (N, {SIDE}, {SIDE}) gray or (N, {SIDE}, {SIDE}, 3) RGB uint8 images"
    # Pixels are whole levels 0..255: a float or wider array would be cut to uint8 silently.
    if x.dtype.kind not in "iu" or (x.size and (int(x.min()) < 0 or int(x.max()) > 255)):
        raise DataError(where, f"pixels of dtype {x.dtype} are not whole levels 0..255", _NPZ_FIX)
    try:
        gray = to_gray(x)
    except ValueError:
        gray = None
    if gray is None or gray.shape[1:] != (SIDE * SIDE,):
        raise DataError(where, f"images of shape {x.shape}; CIFAR-10 is {shapes}", _NPZ_FIX)
    return gray


def load(request: TaskRequest) -> TaskSplits:
    x, y = _read_split(request, "train")
    train, val = carve_validation(x, y, int(request.option("n_val")), SPLIT_SEED)
    max_train = request.option("max_train")
    if max_train:
        train = ArraySplit(train.x[:max_train], train.y[:max_train])
    resolution = int(request.option("resolution"))
    info = TaskInfo(name="image", input_kind="continuous", seq_len=resolution**2, num_classes=NUM_CLASSES, levels=256,
                    image_side=resolution)
    source = str(find_npz(request.data_dir) or find_batches(request.data_dir) or f"hf:{HF_DATASET}")
    return TaskSplits(info, train, val, lambda: ArraySplit(*_read_split(request, "test")), source=source)


register(TaskDef(
    name="image", description="CIFAR-10 grayscale (LRA Image), 1,024 pixels, 45k/5k/10k",
    defaults={"resolution": 32, "n_val": 5000, "max_train": None}, load=load, check_available=check_available,
    rules={"resolution": Option(int, low=1, divides=SIDE)},
))
