"""LRA Text: IMDb sentiment at byte level (2 classes, 25k train / 25k test).

Sources, in order: ``DATA_DIR/aclImdb/{train,test}/{pos,neg}/*.txt`` (the Stanford release as
extracted), else the Hugging Face hub copy ``stanfordnlp/imdb`` (when reachable or cached).
Tokens are UTF-8 bytes shifted past the four specials; reviews are truncated to ``max_len``.
IMDb has no validation split: ``n_val`` reviews are carved from train with a fixed seed.

There is no offline copy of IMDb. For smoke runs without the release, `generate_synthetic_imdb`
writes a small *synthetic* corpus in the aclImdb layout (invented reviews whose label follows
their sentiment words -- not IMDb; numbers on it say nothing about IMDb), read with ``--data-dir``.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from sptune.errors import DataError
from sptune.tasks.arrays import capped_len, limit_train, pad_rows
from sptune.tasks.base import ArraySplit, TaskInfo, TaskSplits, carve_validation, seeded_permutation
from sptune.tasks.content_hash import tree_fingerprint
from sptune.tasks.hub import OFFLINE_FIX, hub_problem, load_hub_dataset
from sptune.tasks.prepared import cached_splits
from sptune.tasks.registry import TaskDef, TaskRequest, register

SPECIALS = ("<pad>", "<mask>", "<cls>", "<eos>")
BYTE_OFFSET = len(SPECIALS)
HF_DATASET = "stanfordnlp/imdb"
FOLDER = "aclImdb"
SPLIT_SEED = 1618  # fixed: every study sees the same train/val carve-out
LABEL_DIRS = (("neg", 0), ("pos", 1))


def byte_token(b: int) -> str:
    return chr(b) if 33 <= b <= 126 else f"<0x{b:02X}>"


BYTE_VOCAB = SPECIALS + tuple(byte_token(b) for b in range(256))


def encode_bytes(texts: Iterable[str], max_len: int) -> list[np.ndarray]:
    """UTF-8 bytes of each text as ids (byte + 4), truncated to ``max_len``."""
    return [np.frombuffer(t.encode("utf-8")[:max_len], dtype=np.uint8).astype(np.int64) + BYTE_OFFSET
            for t in texts]


def byte_info(name: str, seq_len: int, num_classes: int, paired: bool = False) -> TaskInfo:
    return TaskInfo(
        name=name, input_kind="tokens", seq_len=seq_len, num_classes=num_classes,
        vocab_size=len(BYTE_VOCAB), pad_id=0, mask_id=1, paired=paired, vocab=BYTE_VOCAB,
    )


# ----------------------------------------------------------------------------- aclImdb reader
def _file_order(path: Path) -> tuple:
    stem = path.stem.split("_")[0]  # files are named <id>_<rating>.txt
    return (0, int(stem), path.name) if stem.isdigit() else (1, 0, path.name)


def _missing(path: Path, what: str) -> DataError:
    return DataError(
        str(path), what,
        f"extract aclImdb_v1.tar.gz so that DATA_DIR/{FOLDER}/{{train,test}}/{{pos,neg}}/*.txt exist, or "
        f"remove {FOLDER}/ from --data-dir to use the Hugging Face copy '{HF_DATASET}'",
    )


def read_imdb_split(root: Path, split: str) -> tuple[list[str], np.ndarray]:
    texts: list[str] = []
    labels: list[int] = []
    for sub, label in LABEL_DIRS:
        folder = root / split / sub
        if not folder.is_dir():
            raise _missing(folder, "IMDb review folder not found")
        files = sorted(folder.glob("*.txt"), key=_file_order)
        if not files:
            raise _missing(folder, "IMDb review folder holds no *.txt files")
        for path in files:
            try:
                texts.append(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError) as err:
                problem = f"cannot be read as UTF-8 text ({err})"
                raise DataError(str(path), problem, "re-extract the release") from err
            labels.append(label)
    return texts, np.asarray(labels, dtype=np.int64)


# ----------------------------------------------------------------------------- synthetic corpus
POSITIVE_WORDS = ("excellent", "wonderful", "superb", "brilliant", "moving", "delightful", "masterful", "gripping")
NEGATIVE_WORDS = ("terrible", "boring", "awful", "dreadful", "clumsy", "tedious", "pointless", "lifeless")
SYNTHETIC_MARKER = "SYNTHETIC.txt"


def _synthetic_review(rng: random.Random, filler: list[str], label: int, n_chars: int, agree: float) -> str:
    """Filler words with sentiment words mixed in; each agrees with ``label`` with probability ``agree``."""
    lexicons = (NEGATIVE_WORDS, POSITIVE_WORDS)
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < n_chars:
        if rng.random() < 0.12:
            side = label if rng.random() < agree else 1 - label
            words.append(rng.choice(lexicons[side]))
        else:
            words.append(rng.choice(filler))
    # The label must be the majority of the sentiment words: add agreeing ones at random places until it is.
    votes = sum(1 if w in lexicons[label] else -1 for w in words if w in POSITIVE_WORDS + NEGATIVE_WORDS)
    for _ in range(max(0, 1 - votes)):
        words.insert(rng.randrange(len(words) + 1), rng.choice(lexicons[label]))
    return " ".join(words).capitalize() + "."


def generate_synthetic_imdb(
    out_dir: str | Path,
    seed: int = 0,
    n_train: int = 2000,
    n_test: int = 500,
    min_chars: int = 80,
    max_chars: int = 250,
    agree: float = 0.75,
) -> Path:
    """Write a small **synthetic** sentiment corpus as ``out_dir/aclImdb/{train,test}/{pos,neg}/<id>_<r>.txt``.

    Not IMDb: reviews are random filler words with sentiment words mixed in, and the label is the
    majority sentiment of those words (balanced classes). It exercises the Text task's reader and
    byte-level pipeline offline; ``aclImdb/SYNTHETIC.txt`` says so next to the files.
    """
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    filler = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 7))) for _ in range(400)]
    root = Path(out_dir) / FOLDER
    for split, n in (("train", n_train), ("test", n_test)):
        for sub, label in LABEL_DIRS:
            folder = root / split / sub
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(n // 2 if label else n - n // 2):
                rating = rng.randint(7, 10) if label else rng.randint(1, 4)
                text = _synthetic_review(rng, filler, label, rng.randint(min_chars, max_chars), agree)
                (folder / f"{i}_{rating}.txt").write_text(text, encoding="utf-8")
    (root / SYNTHETIC_MARKER).write_text(
        f"Synthetic reviews written by sptune.tasks.text.generate_synthetic_imdb(seed={seed}); NOT IMDb.\n"
    )
    return root


# ----------------------------------------------------------------------------- hub fallback
@functools.lru_cache(maxsize=2)
def _hub_split(split: str) -> tuple[tuple[str, ...], np.ndarray]:
    ds = load_hub_dataset(HF_DATASET, split=split)
    return tuple(ds["text"]), np.asarray(ds["label"], dtype=np.int64)


_LOCAL_FIX = (f"pass --data-dir DIR holding {FOLDER}/{{train,test}}/{{pos,neg}}/*.txt (aclImdb_v1.tar.gz extracted), "
              "or use task name: hf on a local save_to_disk folder or parquet/arrow/csv/json files")


def _hub_or_error(data_dir: Path | None, split: str) -> tuple[list[str], np.ndarray]:
    if data_dir is not None:  # a folder of the user's own: never the hub
        raise DataError(f"--data-dir {data_dir}", f"holds no {FOLDER}/ folder (with --data-dir the Hugging Face hub "
                        "is not asked)", _LOCAL_FIX)
    try:
        texts, labels = _hub_split(split)
    except Exception as err:  # any hub failure means "not available": report both options
        raise DataError(
            "task text (IMDb)",
            f"no --data-dir given, and the Hugging Face hub copy '{HF_DATASET}' could not be loaded "
            f"({hub_problem(err)})",
            f"{_LOCAL_FIX}; {OFFLINE_FIX}",
        ) from err
    return list(texts), labels


# ----------------------------------------------------------------------------- task
def imdb_root(data_dir: Path | None) -> Path | None:
    if data_dir is not None and (data_dir / FOLDER).is_dir():
        return data_dir / FOLDER
    return None


def _read(request: TaskRequest, split: str) -> tuple[list[str], np.ndarray]:
    root = imdb_root(request.data_dir)
    if root is not None:
        return read_imdb_split(root, split)
    return _hub_or_error(request.data_dir, split)


def _build(request: TaskRequest, source: str) -> TaskSplits:
    max_len = int(request.option("max_len"))
    texts, y = _read(request, "train")
    n_val = int(request.option("n_val"))
    if not 0 < n_val < len(y):
        raise DataError("task.n_val", f"must be between 1 and {len(y) - 1}: the train split holds {len(y)} reviews "
                        f"(got {n_val})", "lower n_val (it is carved out of train)")
    # Shuffle once (fixed seed): the files come grouped by label, and max_train takes a prefix.
    order = seeded_permutation(len(y), SPLIT_SEED)
    rows = encode_bytes((texts[i] for i in order), max_len)
    seq_len = capped_len(rows, max_len)
    train, val = carve_validation(pad_rows(rows, seq_len), y[order], n_val, SPLIT_SEED)

    def load_test() -> ArraySplit:
        test_texts, test_y = _read(request, "test")
        return ArraySplit(pad_rows(encode_bytes(test_texts, max_len), seq_len), test_y)

    return TaskSplits(byte_info("text", seq_len, 2), train, val, load_test, source=source)


def load(request: TaskRequest) -> TaskSplits:
    root = imdb_root(request.data_dir)
    if root is not None:
        # Training reviews by content, test reviews by stamp: the test split stays unopened until its evaluation.
        origin: object = {f"{split}/{sub}": tree_fingerprint(root / split / sub, content=split != "test")
                          for split in ("train", "test") for sub, _ in LABEL_DIRS if (root / split / sub).is_dir()}
        synthetic = (root / SYNTHETIC_MARKER).is_file()
        source = f"{root} (SYNTHETIC reviews, not IMDb)" if synthetic else str(root)
    else:
        origin, source = f"hf:{HF_DATASET}", f"hf:{HF_DATASET}"
    key = {"origin": origin, "max_len": int(request.option("max_len")), "n_val": int(request.option("n_val"))}
    splits = cached_splits("text", key, lambda: _build(request, source))
    return limit_train(splits, request.option("max_train"))


def check_available(request: TaskRequest) -> None:
    root = imdb_root(request.data_dir)
    if root is None:
        _hub_or_error(request.data_dir, "train")
        return
    for split in ("train", "test"):
        for sub, _ in LABEL_DIRS:
            folder = root / split / sub
            if not folder.is_dir():
                raise _missing(folder, "IMDb review folder not found")
            if next(folder.glob("*.txt"), None) is None:
                raise _missing(folder, "IMDb review folder holds no *.txt files")


register(TaskDef(
    name="text", description="LRA Text: IMDb sentiment, byte level (2 classes); aclImdb/ in --data-dir or the HF hub",
    defaults={"max_len": 1024, "n_val": 2500, "max_train": None}, load=load, check_available=check_available,
))
