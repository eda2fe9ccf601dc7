"""Bit memory and bit XOR, the synthetic tasks of the frozen-pretrained-transformer paper (Lu et al.).

Both are recast as single-label classification so they share the classifier head of every task:

- ``bit_memory``: ``n_strings`` (5) random bitstrings of ``n_bits`` are shown, then a copy of one
  of them with each bit hidden (``?``) with probability ``mask_prob``. The paper asks for the
  hidden bits; here the label is *which* string (0..n_strings-1) the masked copy came from, which
  requires the same memory of the earlier strings.
- ``bit_xor``: two bitstrings of ``n_bits`` (5) are shown; the paper asks for their element-wise
  XOR. Here the label is that whole XOR read as a binary number (2**n_bits classes, most
  significant bit first), so predicting the label is exactly predicting every output bit.

Sequences are ``s1 | s2 | ... | query`` (memory) and ``a | b`` (XOR), one token per bit. Data are
generated in memory from ``data_seed`` (fixed by default, so every study sees the same data); XOR
inputs are distinct across splits when the input space allows. ``python -m sptune.data generate
bits --out DIR`` writes the same data as ``DIR/bits/<task>_{train,val,test}.tsv``
(``Source<TAB>Target``), which ``--data-dir DIR`` reads back.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sptune.errors import DataError
from sptune.tasks.base import ArraySplit, TaskInfo, TaskSplits
from sptune.tasks.option_rules import Option
from sptune.tasks.registry import TaskDef, TaskRequest, register

SPECIALS = ("<pad>", "<mask>", "<cls>", "<eos>")
VOCAB = SPECIALS + ("0", "1", "?", "|")
ZERO, HIDDEN, SEP = VOCAB.index("0"), VOCAB.index("?"), VOCAB.index("|")
SPLITS = ("train", "val", "test")
HEADER = "Source\tTarget"
# Sampling without replacement enumerates the input space; above this size collisions are negligible.
ENUMERATE_LIMIT = 1 << 22

Arrays = dict[str, ArraySplit]


def _with_separators(blocks: list[np.ndarray]) -> np.ndarray:
    """Join (N, n_bits) token blocks with a ``|`` column between consecutive blocks."""
    sep = np.full((len(blocks[0]), 1), SEP, dtype=np.int64)
    parts = [blocks[0]]
    for block in blocks[1:]:
        parts += [sep, block]
    return np.concatenate(parts, axis=1)


def bit_memory_arrays(
    rng: np.random.Generator, n: int, n_bits: int, n_strings: int, mask_prob: float
) -> ArraySplit:
    strings = rng.integers(0, 2, size=(n, n_strings, n_bits))
    y = rng.integers(0, n_strings, size=n)
    query = strings[np.arange(n), y] + ZERO
    query[rng.random((n, n_bits)) < mask_prob] = HIDDEN
    blocks = [strings[:, k] + ZERO for k in range(n_strings)] + [query]
    return ArraySplit(_with_separators(blocks).astype(np.int64), y.astype(np.int64))


def _distinct_codes(rng: np.random.Generator, n: int, n_bits: int) -> np.ndarray | None:
    """``n`` distinct 2*n_bits-bit input codes (a, b), so no input repeats across splits.

    None when the code would not fit an int64: rows are then independent random bits, and a
    repeat has probability below n**2 / 2**64.
    """
    space = 4**n_bits
    if n > space:
        raise DataError(
            "task bit_xor",
            f"asked for {n} distinct inputs but two {n_bits}-bit strings have only {space}",
            "lower n_train + n_val + n_test or raise n_bits",
        )
    if space <= ENUMERATE_LIMIT:
        return rng.choice(space, size=n, replace=False)
    if n_bits > 31:
        return None
    codes = np.zeros(0, dtype=np.int64)
    while len(codes) < n:  # draw, drop repeats (keeping first occurrences), top up
        codes = np.concatenate([codes, rng.integers(0, space, size=n, dtype=np.int64)])
        _, first = np.unique(codes, return_index=True)
        codes = codes[np.sort(first)]
    return codes[:n]


def bit_xor_arrays(rng: np.random.Generator, n: int, n_bits: int) -> ArraySplit:
    codes = _distinct_codes(rng, n, n_bits)
    if codes is None:  # too wide for an integer code: independent random bits
        bits = rng.integers(0, 2, size=(n, 2 * n_bits))
    else:
        shifts = np.arange(2 * n_bits - 1, -1, -1)
        bits = (codes[:, None] >> shifts) & 1
    a, b = bits[:, :n_bits], bits[:, n_bits:]
    weights = 1 << np.arange(n_bits - 1, -1, -1)  # most significant bit first
    y = ((a ^ b) * weights).sum(axis=1)
    return ArraySplit(_with_separators([a + ZERO, b + ZERO]).astype(np.int64), y.astype(np.int64))


def generate_splits(task: str, options: dict) -> Arrays:
    """All three splits of ``task`` from one seeded stream, drawn together so none overlaps."""
    rng = np.random.default_rng(int(options["data_seed"]))
    sizes = [int(options[f"n_{s}"]) for s in SPLITS]
    if task == "bit_memory":
        whole = bit_memory_arrays(rng, sum(sizes), int(options["n_bits"]), int(options["n_strings"]),
                                  float(options["mask_prob"]))
    else:
        whole = bit_xor_arrays(rng, sum(sizes), int(options["n_bits"]))
    bounds = np.cumsum([0] + sizes)
    ranges = zip(SPLITS, bounds[:-1], bounds[1:], strict=True)
    return {s: ArraySplit(whole.x[lo:hi], whole.y[lo:hi]) for s, lo, hi in ranges}


def num_classes(task: str, options: dict) -> int:
    return int(options["n_strings"]) if task == "bit_memory" else 2 ** int(options["n_bits"])


def classes_in_rows(task: str, x: np.ndarray) -> int:
    """Class count implied by the sequence layout of files (which may use other n_bits than the options)."""
    n_separators = int((x[0] == SEP).sum())
    if task == "bit_memory":
        return n_separators  # s1 | ... | s_k | query: k strings, k separators
    return 2 ** ((x.shape[1] - 1) // 2)  # a | b


# ----------------------------------------------------------------------------- files
def split_file(root: Path, task: str, split: str) -> Path:
    return root / "bits" / f"{task}_{split}.tsv"


def write_split(path: Path, split: ArraySplit) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = zip(split.x, split.y, strict=True)
    lines = [HEADER] + [" ".join(VOCAB[t] for t in row) + f"\t{label}" for row, label in rows]
    path.write_text("\n".join(lines) + "\n")


def read_split(path: Path) -> ArraySplit:
    index = {tok: i for i, tok in enumerate(VOCAB)}
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(str(path), f"cannot be read ({err})", "regenerate it") from err
    if not lines or lines[0] != HEADER:
        raise DataError(str(path), "line 1 is not the header 'Source<TAB>Target'", "regenerate it")
    rows, labels = [], []
    for lineno, line in enumerate(lines[1:], start=2):
        source, sep, target = line.rpartition("\t")
        tokens = source.split()
        ragged = bool(rows) and len(tokens) != len(rows[0])
        if not sep or not target.isdigit() or ragged or any(t not in index for t in tokens):
            raise DataError(f"{path}:{lineno}", "malformed or truncated row", "regenerate the file")
        rows.append([index[t] for t in tokens])
        labels.append(int(target))
    if not rows:
        raise DataError(str(path), "holds no rows", "regenerate the file")
    return ArraySplit(np.asarray(rows, dtype=np.int64), np.asarray(labels, dtype=np.int64))


def generate_bits_files(
    out_dir: str | Path, seed: int, n_train: int = 4000, n_val: int = 500, n_test: int = 500,
    n_bits: int | None = None, tasks: tuple[str, ...] = ("bit_memory", "bit_xor"),
) -> Path:
    """Write ``out_dir/bits/<task>_{train,val,test}.tsv`` for each task (XOR capped by its input space)."""
    root = Path(out_dir)
    for task in tasks:
        options = {**DEFAULTS[task], "data_seed": seed, "n_train": n_train, "n_val": n_val, "n_test": n_test}
        if n_bits is not None:
            options["n_bits"] = n_bits
        for split, arrays in generate_splits(task, options).items():
            write_split(split_file(root, task, split), arrays)
    return root / "bits"


# ----------------------------------------------------------------------------- tasks
DEFAULTS = {
    "bit_memory": {"n_bits": 32, "n_strings": 5, "mask_prob": 0.5, "n_train": 4000, "n_val": 500,
                   "n_test": 500, "data_seed": 0, "max_train": None},
    "bit_xor": {"n_bits": 5, "n_train": 800, "n_val": 100, "n_test": 100, "data_seed": 0, "max_train": None},
}


def _files_present(request: TaskRequest) -> bool:
    # Bits are synthetic by nature: a --data-dir without bits/ files (e.g. one set for CIFAR) is not
    # an error, the data are generated in memory instead.
    return request.data_dir is not None and split_file(request.data_dir, request.name, "train").is_file()


def _loader(task: str):
    def load(request: TaskRequest) -> TaskSplits:
        if _files_present(request):
            root = request.data_dir
            train, val = (read_split(split_file(root, task, s)) for s in ("train", "val"))
            load_test = lambda: read_split(split_file(root, task, "test"))  # noqa: E731
            classes = classes_in_rows(task, train.x)
            source = str(root / "bits")
        else:
            parts = generate_splits(task, request.options)
            train, val = parts["train"], parts["val"]
            load_test = lambda: generate_splits(task, request.options)["test"]  # noqa: E731
            classes = num_classes(task, request.options)
            source = f"generated in memory (data_seed {request.option('data_seed')})"
        max_train = request.option("max_train")
        if max_train:
            train = ArraySplit(train.x[:max_train], train.y[:max_train])
        info = TaskInfo(name=task, input_kind="tokens", seq_len=train.x.shape[1], num_classes=classes,
                        vocab_size=len(VOCAB), pad_id=0, mask_id=1, vocab=VOCAB)
        return TaskSplits(info, train, val, load_test, source=source)

    return load


def _checker(task: str):
    def check_available(request: TaskRequest) -> None:
        if _files_present(request):
            for split in SPLITS:
                path = split_file(request.data_dir, task, split)
                if not path.is_file():
                    fix = f"regenerate: `python -m sptune.data generate bits --out {request.data_dir}`"
                    raise DataError(str(path), "split file not found", fix)
        elif task == "bit_xor":
            total = sum(int(request.option(f"n_{s}")) for s in SPLITS)
            if total > 4 ** int(request.option("n_bits")):
                _distinct_codes(np.random.default_rng(0), total, int(request.option("n_bits")))

    return check_available


for _task, _description in (
    ("bit_memory", "FPT bit memory: which of 5 bitstrings a half-masked copy came from (generated)"),
    ("bit_xor", "FPT bit XOR: element-wise XOR of two bitstrings as one class (generated)"),
):
    register(TaskDef(name=_task, description=_description, defaults=DEFAULTS[_task],
                     load=_loader(_task), check_available=_checker(_task),
                     rules={"mask_prob": Option(float, low=0, high=1)}))
