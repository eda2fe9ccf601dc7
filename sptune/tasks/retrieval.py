"""LRA Retrieval (AAN): do two papers' texts cite each other? Byte level, 2 classes.

Official files: ``DATA_DIR/aan/new_aan_pairs.{train,eval,test}.tsv`` (no header; columns
``label, id1, id2, text1, text2``; the LRA tarball's ``tsv_data/`` folder name is accepted too).
Each document is UTF-8 bytes (+4 for the specials) truncated to ``max_len``; x is (N, 2, L) and
``TaskInfo.paired`` tells the model to encode both and combine [a, b, a-b, a*b].

Without ``--data-dir`` (option ``generate`` true) `generate_retrieval` writes a small synthetic
set in the same layout: documents about one of a few topics, positive pairs share the topic.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np

from sptune.errors import DataError
from sptune.tasks.arrays import capped_len, pad_rows
from sptune.tasks.base import ArraySplit, TaskSplits
from sptune.tasks.cache import ensure_generated
from sptune.tasks.registry import TaskDef, TaskRequest, register
from sptune.tasks.sources import (
    SplitFileLayout,
    generator_options,
    generator_params,
    load_split_files,
    will_generate,
)
from sptune.tasks.text import byte_info, encode_bytes

SPLIT_FILES = {
    "train": "new_aan_pairs.train.tsv",
    "val": "new_aan_pairs.eval.tsv",
    "test": "new_aan_pairs.test.tsv",
}
FOLDERS = ("aan", "tsv_data")
N_FIELDS = 5
GENERATOR_VERSION = 1
# Generator knobs exposed as task options (``gen_<name>``); shorter documents and fewer topics make
# the synthetic task learnable by CPU-sized models in a few epochs.
GEN_OPTIONS = ("n_train", "n_val", "n_test", "min_chars", "max_chars", "n_topics")


# ----------------------------------------------------------------------------- reader
def read_pairs(path: Path) -> tuple[list[str], list[str], np.ndarray]:
    """Both texts and the label of every row; a malformed row is a DataError naming file and line."""
    try:
        lines = path.read_text(encoding="utf-8").split("\n")
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(str(path), f"cannot be read as UTF-8 text ({err})", "re-download the file") from err
    first, second, labels = [], [], []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        fields = line.rstrip("\r").split("\t")
        label = _label(fields[0]) if len(fields) == N_FIELDS else None
        if label is None:
            raise DataError(
                f"{path}:{lineno}",
                f"expected {N_FIELDS} tab-separated fields 'label id1 id2 text1 text2' with label 0 or 1, "
                f"found {len(fields)} fields (row truncated or malformed)",
                "re-download the LRA release or regenerate the file",
            )
        first.append(fields[3])
        second.append(fields[4])
        labels.append(label)
    if not labels:
        raise DataError(str(path), "holds no rows", "re-download the LRA release or regenerate the file")
    return first, second, np.asarray(labels, dtype=np.int64)


def _label(text: str) -> int | None:
    try:
        value = float(text)  # the release writes labels as floats in some copies ("1.0")
    except ValueError:
        return None
    return int(value) if value in (0.0, 1.0) else None


def encode_pairs(path: Path, max_len: int, seq_len: int | None = None) -> tuple[ArraySplit, int]:
    first, second, y = read_pairs(path)
    rows_a, rows_b = encode_bytes(first, max_len), encode_bytes(second, max_len)
    seq_len = seq_len or capped_len(rows_a + rows_b, max_len)
    x = np.stack([pad_rows(rows_a, seq_len), pad_rows(rows_b, seq_len)], axis=1)
    return ArraySplit(x, y), seq_len


# ----------------------------------------------------------------------------- generator
def _word(rng: random.Random, lo: int, hi: int) -> str:
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(lo, hi)))


def _document(rng: random.Random, filler: list[str], keywords: list[str], n_chars: int, shared: str) -> str:
    words = [shared]
    while sum(len(w) + 1 for w in words) < n_chars:
        words.append(rng.choice(keywords) if rng.random() < 0.2 else rng.choice(filler))
    rng.shuffle(words)
    return " ".join(words) + "."


def generate_retrieval(
    out_dir: str | Path, seed: int, n_train: int, n_val: int, n_test: int,
    min_chars: int = 100, max_chars: int = 400, n_topics: int = 8,
) -> Path:
    """Write ``out_dir/aan/new_aan_pairs.{train,eval,test}.tsv``: label 1 iff both documents share a topic.

    Each topic has its own keywords (8-12 letters; filler words have 2-6); a document mixes them
    (20 %) with common filler words, and the two documents of a positive pair share at least one
    keyword. So label 1 <=> the documents have a keyword in common: the label is recoverable only
    by comparing the two documents. Labels are balanced.
    """
    rng = random.Random(seed)
    filler = [_word(rng, 2, 6) for _ in range(300)]
    topics = [[_word(rng, 8, 12) for _ in range(6)] for _ in range(n_topics)]
    folder = Path(out_dir) / "aan"
    folder.mkdir(parents=True, exist_ok=True)
    doc_id = 0
    for split, n in (("train", n_train), ("val", n_val), ("test", n_test)):
        labels = [1] * (n // 2) + [0] * (n - n // 2)
        rng.shuffle(labels)
        lines = []
        for label in labels:
            a = rng.randrange(n_topics)
            b = a if label else rng.choice([t for t in range(n_topics) if t != a])
            shared = rng.choice(topics[a])  # the pair's common keyword when positive
            docs = [_document(rng, filler, topics[t], rng.randint(min_chars, max_chars),
                              shared if t == a else rng.choice(topics[t])) for t in (a, b)]
            lines.append(f"{label}\tgen{doc_id}\tgen{doc_id + 1}\t{docs[0]}\t{docs[1]}\n")
            doc_id += 2
        (folder / SPLIT_FILES[split]).write_text("".join(lines), encoding="utf-8")
    return folder


# ----------------------------------------------------------------------------- task
LAYOUT = SplitFileLayout(
    "retrieval", FOLDERS, SPLIT_FILES, "AAN retrieval split file not found",
    "aan/new_aan_pairs.{train,eval,test}.tsv", written="a synthetic one",
)


def _generate_into_cache(request: TaskRequest) -> Path:
    params = generator_params(request, GEN_OPTIONS)
    if params["min_chars"] > params["max_chars"] or params["min_chars"] < 1 or params["n_topics"] < 2:
        raise DataError(
            "task retrieval (generator options)",
            f"need 1 <= gen_min_chars <= gen_max_chars and gen_n_topics >= 2 (got {params['min_chars']}, "
            f"{params['max_chars']}, {params['n_topics']})",
            "fix the gen_* options",
        )
    return ensure_generated("retrieval", {"v": GENERATOR_VERSION, **params},
                            lambda d: generate_retrieval(d, **params))


def resolve_files(request: TaskRequest) -> tuple[dict[str, Path], bool]:
    return LAYOUT.resolve(request, lambda: _generate_into_cache(request))


def _build(files: dict[str, Path], max_len: int, source: str) -> TaskSplits:
    train, seq_len = encode_pairs(files["train"], max_len)
    val, _ = encode_pairs(files["val"], max_len, seq_len)
    info = byte_info("retrieval", seq_len, 2, paired=True)
    load_test = lambda: encode_pairs(files["test"], max_len, seq_len)[0]  # noqa: E731
    return TaskSplits(info, train, val, load_test, source=source)


def load(request: TaskRequest) -> TaskSplits:
    files, generated = resolve_files(request)
    return load_split_files("retrieval", request, files, generated, _build)


def check_available(request: TaskRequest) -> None:
    if will_generate(request):
        return  # generated on first load
    files, _ = resolve_files(request)
    with files["train"].open(encoding="utf-8", errors="replace") as f:
        first = f.readline()
    if len(first.rstrip("\n").split("\t")) != N_FIELDS:
        raise DataError(f"{files['train']}:1", f"expected {N_FIELDS} tab-separated fields",
                        "re-download the LRA release")


register(
    TaskDef(
        name="retrieval",
        description="LRA Retrieval (AAN citation pairs), byte level, paired; synthetic offline set without "
        "--data-dir",
        defaults={"max_len": 4000, "max_train": None,
                  **generator_options(min_chars=100, max_chars=400, n_topics=8)},
        load=load,
        check_available=check_available,
    )
)
