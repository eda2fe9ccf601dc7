"""The ``hf`` task's columns: what a column's feature holds, and how each kind of input and label becomes arrays.

- text: UTF-8 bytes as LRA's Text (`sptune.tasks.text`, the same ids), or a character / word vocabulary built
  from the training rows only (most frequent first, ``max_vocab`` at most; others read as ``<unk>``);
- image: gray or the three colour planes one after another, pooled (a side dividing the image's) or resized to
  ``side``, as uint8 levels row-major like the Image task;
- tokens: a column of id lists, shifted past the specials; ids beyond the vocabulary read as ``<unk>``;
- labels: whole numbers, booleans, a ``ClassLabel`` (its names kept), or class names mapped to ids in sorted
  order of the training rows' names.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sptune.errors import DataError, SpecError
from sptune.tasks.arrays import pad_rows
from sptune.tasks.text import BYTE_VOCAB, encode_bytes

SPECIALS = ("<pad>", "<mask>", "<unk>")
UNK = SPECIALS.index("<unk>")


# ----------------------------------------------------------------------------- what a column holds
def feature_kind(feature: Any) -> str:
    """text | image | ids | pixels | class | int | bool | float | other, from a ``datasets`` feature."""
    import datasets

    if isinstance(feature, datasets.ClassLabel):
        return "class"
    if isinstance(feature, datasets.Image):
        return "image"
    if isinstance(feature, (datasets.Array2D, datasets.Array3D)):
        return "pixels"
    if isinstance(feature, datasets.Value):
        dtype = feature.dtype
        if dtype in ("string", "large_string"):
            return "text"
        if dtype == "bool":
            return "bool"
        if dtype.startswith(("int", "uint")):
            return "int"
        if dtype.startswith(("float", "double", "half")):
            return "float"
        return "other"
    inner = getattr(feature, "feature", None)  # List / Sequence / LargeList
    if inner is not None:
        kind = feature_kind(inner)
        return "ids" if kind == "int" else "pixels" if kind in ("ids", "pixels") else "other"
    return "other"


# Which feature kinds each input reads.
INPUT_KINDS = {"text": ("text",), "image": ("image", "pixels", "ids"), "tokens": ("ids",)}
LABEL_KINDS = ("class", "int", "bool", "text")
_INPUT_FIX = {
    "text": "use input: image for an Image feature or pixel arrays, input: tokens for lists of token ids",
    "image": "use input: text (vocab: bytes, char or word) for a column of strings, input: tokens for id lists",
    "tokens": "use input: text for strings, input: image for images",
}


def check_input(field: str, column: str, feature: Any, input_kind: str) -> None:
    found = feature_kind(feature)
    if found not in INPUT_KINDS[input_kind]:
        raise SpecError(
            "task.input", f"is '{input_kind}', but {field} '{column}' holds {found} ({feature})", _INPUT_FIX[input_kind]
        )


def check_label(column: str, feature: Any) -> None:
    found = feature_kind(feature)
    if found == "float":
        raise SpecError(
            "task.label_column",
            f"'{column}' holds float labels ({feature}); a class must be a whole number or a name",
            "cast it, e.g. ds.cast_column('label', datasets.Value('int64')), or "
            "name a column of whole-number or string labels",
        )
    if found not in LABEL_KINDS:
        raise SpecError(
            "task.label_column",
            f"'{column}' holds {feature}, not class labels",
            "name a column of whole numbers, booleans, class names or a ClassLabel",
        )


# ----------------------------------------------------------------------------- labels
@dataclass(frozen=True)
class Labels:
    """How a label column becomes ids: ``names`` (empty: the values are the ids already)."""

    names: tuple[str, ...]
    num_classes: int
    from_names: bool  # the column holds strings mapped through ``names``

    def encode(self, values: Sequence[Any], where: str) -> np.ndarray:
        if not self.from_names:
            return np.asarray(values, dtype=np.int64).reshape(-1)
        ids = {name: i for i, name in enumerate(self.names)}
        unknown = sorted({str(v) for v in values if v not in ids})
        if unknown:
            raise DataError(
                where,
                f"class names {unknown[:5]} are not among the training rows' classes {list(self.names)[:20]}",
                "give every class some training rows, or map the labels to ids yourself",
            )
        return np.asarray([ids[v] for v in values], dtype=np.int64)


def label_mapping(feature: Any, train_values: Sequence[Any], seen_ids: np.ndarray, num_classes: int | None) -> Labels:
    """The label ids: a ClassLabel's names; class names in sorted order of the training rows; or whole numbers
    with ``num_classes`` given, or one more than the largest seen (train and validation)."""
    kind = feature_kind(feature)
    if kind == "class":
        return Labels(tuple(feature.names), num_classes or len(feature.names), False)
    if kind == "text":
        names = tuple(sorted({str(v) for v in train_values}))
        return Labels(names, num_classes or len(names), True)
    return Labels((), num_classes or int(seen_ids.max(initial=0)) + 1, False)


# ----------------------------------------------------------------------------- text and tokens
@dataclass(frozen=True)
class Vocabulary:
    """Token ids of a text column: ``kind`` bytes (LRA's Text), char or word (``tokens`` as built from training
    rows), or ids (an id column, shifted past the specials, ``size`` ids in all)."""

    kind: str
    tokens: tuple[str, ...] = ()
    size: int = 0

    @property
    def table(self) -> tuple[str, ...]:
        if self.kind == "bytes":
            return BYTE_VOCAB
        if self.kind == "ids":
            return SPECIALS + tuple(str(i) for i in range(self.size - len(SPECIALS)))
        return SPECIALS + self.tokens

    def encode(self, values: Sequence[Any]) -> list[np.ndarray]:
        """Each value's ids, untruncated (`pad_rows` cuts them to the task's length)."""
        if self.kind == "bytes":
            return encode_bytes((v or "" for v in values), max_len=2**62)
        if self.kind == "ids":
            rows = [np.asarray(v if v is not None else [], dtype=np.int64) + len(SPECIALS) for v in values]
            return [np.where((r >= self.size) | (r < len(SPECIALS)), UNK, r) for r in rows]
        index = {token: i + len(SPECIALS) for i, token in enumerate(self.tokens)}
        return [np.asarray([index.get(t, UNK) for t in split_text(v or "", self.kind)], dtype=np.int64) for v in values]


def split_text(text: str, kind: str) -> Sequence[str]:
    return list(text) if kind == "char" else text.split()


def build_vocabulary(
    kind: str, train_values: Sequence[Any], max_vocab: int | None, vocab_size: int | None
) -> Vocabulary:
    """The vocabulary of ``kind`` from the training rows only (bytes need none)."""
    if kind == "bytes":
        return Vocabulary("bytes")
    if kind == "ids":
        if vocab_size is None:
            vocab_size = max((int(max(v)) for v in train_values if v is not None and len(v)), default=0) + 1
        return Vocabulary("ids", size=int(vocab_size) + len(SPECIALS))
    counts = Counter(t for v in train_values for t in split_text(v or "", kind))
    ranked = sorted(counts, key=lambda t: (-counts[t], t))
    return Vocabulary(kind, tuple(ranked[:max_vocab] if max_vocab else ranked))


def stack_rows(columns: Sequence[list[np.ndarray]], seq_len: int) -> tuple[np.ndarray, int]:
    """(N, L) from one column of id rows, (N, 2, L) from two; and how many rows were longer than ``seq_len``."""
    truncated = sum(int(len(r) > seq_len) for rows in columns for r in rows)
    arrays = [pad_rows(rows, seq_len) for rows in columns]
    return (arrays[0] if len(arrays) == 1 else np.stack(arrays, axis=1)), truncated


# ----------------------------------------------------------------------------- images
def _pixels(value: Any, color: str, where: str) -> np.ndarray:
    """One image as uint8 (H, W) gray or (H, W, 3) RGB."""
    if hasattr(value, "convert"):  # a PIL image (an Image feature, decoded)
        return np.asarray(value.convert("L" if color == "gray" else "RGB"), dtype=np.uint8)
    array = np.asarray(value)
    if array.dtype.kind not in "iu" or (array.size and (int(array.min()) < 0 or int(array.max()) > 255)):
        raise DataError(
            where,
            f"pixels of dtype {array.dtype} are not whole levels 0..255",
            "store uint8 pixels, e.g. np.rint(x * 255).astype(np.uint8)",
        )
    if array.ndim == 1:  # a flat row: a square image
        side = int(round(np.sqrt(array.size)))
        if side * side != array.size:
            raise DataError(where, f"a flat image of {array.size} pixels is not square", "store images as (H, W)")
        array = array.reshape(side, side)
    if array.ndim == 3 and array.shape[-1] in (1, 3, 4):
        rgb = array[..., :3] if array.shape[-1] != 1 else np.repeat(array, 3, axis=-1)
        if color == "gray":
            return np.rint(rgb[..., 0] * 0.299 + rgb[..., 1] * 0.587 + rgb[..., 2] * 0.114).astype(np.uint8)
        return rgb.astype(np.uint8)
    if array.ndim == 2:
        return array.astype(np.uint8) if color == "gray" else np.repeat(array[..., None], 3, axis=-1).astype(np.uint8)
    raise DataError(where, f"an image of shape {array.shape}", "store images as (H, W), (H, W, 3) or PIL images")


def _to_side(image: np.ndarray, side: int) -> np.ndarray:
    """Average-pooled when ``side`` divides a square image's, else resized (PIL's box filter)."""
    height, width = image.shape[:2]
    if height == width == side:
        return image
    if height == width and height % side == 0:
        f = height // side
        pooled = image.reshape(side, f, side, f, *image.shape[2:]).mean(axis=(1, 3))
        return np.rint(pooled).astype(np.uint8)
    from PIL import Image

    return np.asarray(Image.fromarray(image).resize((side, side), Image.BOX), dtype=np.uint8)


def encode_images(values: Sequence[Any], color: str, side: int | None, where: str) -> tuple[np.ndarray, int]:
    """(N, side * side) gray or (N, 3 * side * side) colour planes, uint8; and the side. Without ``side`` every
    image must be square and of one size."""
    images = [_pixels(v, color, where) for v in values]
    if side is None:
        shapes = {im.shape[:2] for im in images}
        if len(shapes) != 1 or next(iter(shapes))[0] != next(iter(shapes))[1]:
            raise SpecError(
                "task.side",
                f"{where} holds images of sizes {sorted(shapes)[:4]}: no one square side",
                "set task.side: N to resize (or pool) every image to N x N",
            )
        side = next(iter(shapes))[0]
    rows = []
    for image in images:
        image = _to_side(image, side)
        rows.append(image.reshape(-1) if image.ndim == 2 else image.transpose(2, 0, 1).reshape(-1))
    return np.stack(rows) if rows else np.zeros((0, side * side), np.uint8), int(side)
