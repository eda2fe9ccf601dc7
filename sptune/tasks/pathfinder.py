"""LRA Pathfinder (32x32) and PathX (128x128): are the two circles joined by one snake?

Official files: ``DATA_DIR/pathfinder{32,128}/curv_contour_length_14/metadata/<n>.npy`` -- plain text
despite the suffix, one image per line: ``imgs/<k> sample_<i>.png <index> <label> [more fields]`` --
and the grayscale PNGs they name, read row-major (1,024 or 16,384 values). The rows of all
metadata files are split 80/10/10 with a fixed seed. Some released PNGs are missing, empty or
unreadable: they are skipped and counted (`skipped_images`, ``TaskSplits.source``,
`sptune.tasks.skipped`); a split with no readable image at all is a DataError.

Without ``--data-dir`` (option ``generate`` true) a small set is drawn by
`sptune.tasks.pathfinder_generator.generate_pathfinder` into the cache and read back by the same reader.

Option ``resolution`` (default: the task's own, 32 or 128) average-pools the images to a smaller
square after reading -- for CPU-sized studies (a PathX image pooled to 32x32 is 1,024 long instead of
16,384). It must divide the native resolution; the cache always holds the full-size images.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from sptune.errors import DataError, SpecError
from sptune.tasks.arrays import limit_train
from sptune.tasks.base import ArraySplit, TaskInfo, TaskSplits, seeded_permutation
from sptune.tasks.cache import ensure_generated
from sptune.tasks.content_hash import content_fingerprint, tree_fingerprint
from sptune.tasks.option_rules import Option
from sptune.tasks.pathfinder_generator import GENERATOR_VERSION, folder_name, generate_pathfinder
from sptune.tasks.prepared import cached_splits
from sptune.tasks.progress_bar import bar
from sptune.tasks.registry import TaskDef, TaskRequest, register
from sptune.tasks.skipped import record_skipped, reset_skipped, skipped_counts
from sptune.tasks.sources import generator_params, no_data_dir_error, source_label, will_generate

SPLIT_SEED = 2718  # fixed: every study sees the same 80/10/10 split
TRAIN_FRACTION, VAL_FRACTION = 0.8, 0.1
TASK_RESOLUTION = {"pathfinder": 32, "pathx": 128}


# ----------------------------------------------------------------------------- reader
def _numeric_first(path: Path) -> tuple[bool, int, str]:
    return (not path.stem.isdigit(), int(path.stem) if path.stem.isdigit() else 0, path.name)


def metadata_files(root: Path) -> list[Path]:
    meta = root / "metadata"
    # Numeric order (0, 1, ..., 10, ...) as the generator numbers its batches; other names after.
    files = sorted(meta.glob("*.npy"), key=_numeric_first)
    if not files:
        raise DataError(
            str(meta),
            "no metadata/*.npy files (the Pathfinder index) found",
            f"pass --data-dir DIR holding {root.parent.name}/{root.name}/ from the LRA release, or write one "
            f"with `python -m sptune.data generate pathfinder --out DIR`, or leave --data-dir unset "
            "(generate: true) for a small generated set",
        )
    return files


def read_metadata(root: Path) -> list[tuple[str, int]]:
    """(relative image path, label) per metadata line, in file then line order."""
    rows = []
    for path in metadata_files(root):
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError) as err:
            raise DataError(str(path), f"cannot be read as text ({err})", "re-download the metadata") from err
        for lineno, line in enumerate(text.splitlines(), start=1):
            fields = line.split()
            if not fields:
                continue
            if len(fields) < 4 or fields[3] not in ("0", "1"):
                raise DataError(
                    f"{path}:{lineno}",
                    "expected 'imgs/<k> sample_<i>.png <index> <label 0|1> ...' (truncated or malformed)",
                    "re-download or regenerate the metadata file",
                )
            rows.append((f"{fields[0]}/{fields[1]}", int(fields[3])))
    return rows


def split_rows(rows: list[tuple[str, int]]) -> dict[str, list[tuple[str, int]]]:
    order = seeded_permutation(len(rows), SPLIT_SEED)
    n_train, n_val = int(len(rows) * TRAIN_FRACTION), int(len(rows) * VAL_FRACTION)
    cut = n_train + n_val
    parts = {"train": order[:n_train], "val": order[n_train:cut], "test": order[cut:]}
    return {k: [rows[i] for i in np.sort(idx)] for k, idx in parts.items()}


def _read_png(path: Path, resolution: int) -> np.ndarray | None:
    try:
        with Image.open(path) as im:
            pixels = np.asarray(im.convert("L"), dtype=np.uint8)
    except (OSError, ValueError, UnidentifiedImageError, Image.DecompressionBombError):
        return None
    if pixels.shape != (resolution, resolution) or not pixels.any():
        return None  # wrong size or blank: every real sample shows at least its two markers
    return pixels.reshape(-1)


def read_images(root: Path, rows: list[tuple[str, int]], resolution: int) -> tuple[ArraySplit, int]:
    """Pixels and labels of the readable images, and how many were skipped."""
    images, labels = [], []
    for rel, label in bar(rows, len(rows), f"reading {root.name} images", "img"):
        pixels = _read_png(root / rel, resolution)
        if pixels is not None:
            images.append(pixels)
            labels.append(label)
    x = np.stack(images) if images else np.zeros((0, resolution * resolution), dtype=np.uint8)
    return ArraySplit(x, np.asarray(labels, dtype=np.int64)), len(rows) - len(images)


def skipped_images(task: str) -> dict[str, int]:
    """Images skipped per split by the last load of ``task`` (test appears once it was read)."""
    return skipped_counts(task)


def _read_split(task: str, root: Path, rows: list[tuple[str, int]], split: str, res: int) -> ArraySplit:
    part, skipped = read_images(root, rows, res)
    record_skipped(task, split, skipped)
    if rows and not len(part):
        raise DataError(
            str(root / "imgs"),
            f"none of the {len(rows)} {split} images named in metadata/ is a readable "
            f"{res}x{res} PNG",
            "check that imgs/ was extracted next to metadata/ and matches this resolution",
        )
    return part


# ----------------------------------------------------------------------------- tasks
def resolve_root(task: str, request: TaskRequest) -> tuple[Path, bool]:
    resolution, cl = TASK_RESOLUTION[task], int(request.option("contour_length"))
    if request.data_dir is not None:
        return request.data_dir / f"pathfinder{resolution}" / folder_name(cl), False
    if not request.option("generate"):
        raise no_data_dir_error(task, f"pathfinder{resolution}/{folder_name(cl)}/")
    params = {**generator_params(request, ["n"]), "resolution": resolution, "contour_length": cl}
    folder = ensure_generated(f"pathfinder{resolution}", {"v": GENERATOR_VERSION, **params},
                              lambda d: generate_pathfinder(d, **params))
    return folder / f"pathfinder{resolution}" / folder_name(cl), True


def _build(task: str, root: Path, source: str) -> TaskSplits:
    resolution = TASK_RESOLUTION[task]
    reset_skipped(task)
    parts = split_rows(read_metadata(root))
    train = _read_split(task, root, parts["train"], "train", resolution)
    val = _read_split(task, root, parts["val"], "val", resolution)
    skipped = skipped_counts(task)
    info = TaskInfo(name=task, input_kind="continuous", seq_len=resolution**2, num_classes=2, levels=256,
                    image_side=resolution)
    note = f"{source} (skipped unreadable images: train {skipped['train']}, val {skipped['val']})"
    load_test = lambda: _read_split(task, root, parts["test"], "test", resolution)  # noqa: E731
    return TaskSplits(info, train, val, load_test, note)


def _require_imgs(root: Path) -> None:
    if not (root / "imgs").is_dir():
        raise DataError(str(root / "imgs"), "image folder not found", "extract imgs/ next to metadata/")


def _loader(task: str):
    def load(request: TaskRequest) -> TaskSplits:
        root, generated = resolve_root(task, request)
        _require_imgs(root)
        # Images by stamp: imgs/ holds every split's, and test images stay unopened until their evaluation.
        key = {"files": content_fingerprint(metadata_files(root)), "imgs": tree_fingerprint(root / "imgs", False)}
        source = source_label(root, generated)
        splits = cached_splits(task, key, lambda: _build(task, root, source))
        return limit_train(pool_splits(splits, _resolution(task, request)), request.option("max_train"))

    return load


def _resolution(task: str, request: TaskRequest) -> int:
    """The requested side length, checked: a positive divisor of the task's native resolution."""
    native, value = TASK_RESOLUTION[task], request.option("resolution")
    if value is None:
        return native
    if isinstance(value, bool) or not isinstance(value, int) or value < 1 or native % value:
        divisors = [d for d in range(1, native + 1) if native % d == 0 and d >= 4]
        raise SpecError(
            "task.resolution",
            f"must be a whole number dividing {task}'s native {native} (got {value!r})",
            f"use one of: {', '.join(map(str, divisors))}",
        )
    return value


def pool_images(x: np.ndarray, native: int, resolution: int) -> np.ndarray:
    """Average-pool row-major (N, native**2) uint8 images to (N, resolution**2), rounding to uint8."""
    if resolution == native:
        return x
    f = native // resolution
    pooled = np.asarray(x, dtype=np.float32).reshape(len(x), resolution, f, resolution, f).mean(axis=(2, 4))
    return np.rint(pooled).reshape(len(x), -1).astype(np.uint8)


def pool_splits(splits: TaskSplits, resolution: int) -> TaskSplits:
    """The same splits at ``resolution`` x ``resolution`` (the test split is pooled when it is read)."""
    native = int(round(splits.info.seq_len**0.5))
    if resolution == native:
        return splits
    # The image's side too: what reads a sequence back as an image (the trivial predictors' neighbour mean) needs it.
    info = dataclasses.replace(splits.info, seq_len=resolution**2, image_side=resolution)

    def pooled(split: ArraySplit) -> ArraySplit:
        return ArraySplit(pool_images(split.x, native, resolution), split.y)

    source = f"{splits.source} [pooled {native}x{native} -> {resolution}x{resolution}]"
    return splits.replace(info=info, train=pooled(splits.train), val=pooled(splits.val), source=source,
                          map_test=pooled)


def _checker(task: str):
    def check_available(request: TaskRequest) -> None:
        _resolution(task, request)
        if will_generate(request):
            return  # generated on first load
        root, _ = resolve_root(task, request)
        files = metadata_files(root)
        first = next((ln for ln in files[0].read_text(errors="replace").splitlines() if ln.strip()), "")
        if len(first.split()) < 4:
            raise DataError(f"{files[0]}:1", "not a Pathfinder metadata line", "re-download the metadata")
        _require_imgs(root)

    return check_available


for _task, _n in (("pathfinder", 2000), ("pathx", 400)):
    register(
        TaskDef(
            name=_task,
            description=f"LRA {'Pathfinder' if _task == 'pathfinder' else 'PathX'} "
            f"({TASK_RESOLUTION[_task]}x{TASK_RESOLUTION[_task]} pixels, 2 classes); generated offline "
            "without --data-dir",
            defaults={"max_train": None, "contour_length": 14, "resolution": None, "generate": True, "gen_seed": 0,
                      "gen_n": _n},
            rules={"resolution": Option(int, low=1, nullable=True, divides=TASK_RESOLUTION[_task],
                                        null_means="the native resolution")},
            load=_loader(_task),
            check_available=_checker(_task),
        )
    )

__all__ = ["read_metadata", "skipped_images", "split_rows"]
