"""LRA ListOps: nested MIN/MAX/MED/SM expressions over digits, 10 classes.

Official files: ``DATA_DIR/listops/basic_{train,val,test}.tsv`` (header ``Source<TAB>Target``;
the LRA tarball's ``listops-1000/`` folder name is accepted too). Tokenisation follows LRA:
``]`` is a token of its own (dropping it makes the task unsolvable), ``(`` and ``)`` are dropped,
the rest is split on whitespace. The vocabulary is the specials followed by the sorted tokens of
the *train* file, so it is a pure function of that file and identical for pretraining and
finetuning (the prepared cache also stores it as ``vocab.json``).

Without ``--data-dir`` (and option ``generate`` true) a small dataset is generated offline with
`generate_listops` -- the LRA generator, at CPU-scale lengths -- and read back by the same reader.
"""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np

from sptune.errors import DataError
from sptune.tasks.arrays import capped_len, pad_rows
from sptune.tasks.base import ArraySplit, TaskInfo, TaskSplits
from sptune.tasks.cache import ensure_generated
from sptune.tasks.progress_bar import bar
from sptune.tasks.registry import TaskDef, TaskRequest, register
from sptune.tasks.sources import (
    SplitFileLayout,
    generator_options,
    generator_params,
    load_split_files,
    will_generate,
)

SPECIALS = ("<pad>", "<mask>", "<cls>", "<eos>")
OPERATORS = ("[MIN", "[MAX", "[MED", "[SM")
END = "]"
VALUE_P = 0.25  # probability that a node below max depth is an operator (LRA's VALUE_P)
SPLIT_FILES = {"train": "basic_train.tsv", "val": "basic_val.tsv", "test": "basic_test.tsv"}
FOLDERS = ("listops", "listops-1000")  # our layout first, then the LRA tarball's folder name
HEADER = "Source\tTarget"
GENERATOR_VERSION = 1
# Generator arguments exposed as task options gen_<name>, besides the seed.
GENERATOR_KNOBS = ("n_train", "n_val", "n_test", "min_len", "max_len", "max_depth", "max_args")

# A node is a digit (leaf) or (operator, [children]).
Node = int | tuple[str, list["Node"]]


# ----------------------------------------------------------------------------- generator
class _TooLong(Exception):
    """A tree grew past the length limit; it would be rejected, so stop growing it."""


def generate_tree(
    rng: random.Random, depth: int, max_depth: int, max_args: int, budget: int
) -> tuple[Node, int]:
    """One LRA tree and its length (1 per digit, 2 per operator: its token and ``]``).

    Raises `_TooLong` once the length reaches ``budget``: such trees are rejected anyway, so
    stopping early changes no accepted tree's distribution, only the time wasted on huge ones.
    """
    is_op = rng.random() < VALUE_P if depth < max_depth else False
    if not is_op:
        return rng.randrange(10), 1
    length = 2
    children: list[Node] = []
    for _ in range(rng.randint(2, max_args)):
        child, child_len = generate_tree(rng, depth + 1, max_depth, max_args, budget - length)
        children.append(child)
        length += child_len
        if length >= budget:
            raise _TooLong
    return (rng.choice(OPERATORS), children), length


def tree_to_string(node: Node) -> str:
    """LRA's left-nested print: ``[MAX 2 9 ]`` becomes ``( ( ( [MAX 2 ) 9 ) ] )``."""
    parts: list[str] = []
    _emit(node, parts)
    return " ".join(parts)


def _emit(node: Node, parts: list[str]) -> None:
    if isinstance(node, int):
        parts.append(str(node))
        return
    op, children = node
    parts.extend(["("] * (len(children) + 1))
    parts.append(op)
    for child in children:
        _emit(child, parts)
        parts.append(")")
    parts.extend([END, ")"])


def tree_value(node: Node) -> int:
    if isinstance(node, int):
        return node
    op, children = node
    values = sorted(tree_value(c) for c in children)
    if op == "[MIN":
        return values[0]
    if op == "[MAX":
        return values[-1]
    if op == "[SM":
        return sum(values) % 10
    mid = len(values) // 2  # [MED: int(np.median), i.e. mean of the middle two, truncated
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) // 2


def sample_listops(
    rng: random.Random, n: int, min_len: int, max_len: int, max_depth: int, max_args: int
) -> list[tuple[str, int]]:
    """``n`` distinct (expression, value) pairs with ``min_len < length < max_len``, by rejection.

    Rejection is exact but slow when the window is far from the tree-size distribution (at
    max_depth 10 most draws are single digits); the attempt cap turns "impossible" into an error.
    """
    seen: dict[str, int] = {}  # insertion-ordered, so the output is a pure function of the seed
    attempts, cap = 0, 2000 * n + 100_000
    progress = bar(None, n, "generating listops", "tree")
    while len(seen) < n:
        attempts += 1
        if attempts > cap:
            raise DataError(
                "listops generator",
                f"only {len(seen)} of {n} distinct trees with {min_len} < length < {max_len} "
                f"after {cap} draws (max_depth {max_depth}, max_args {max_args})",
                "widen the length window, raise max_depth, or ask for fewer examples",
            )
        try:
            tree, length = generate_tree(rng, 1, max_depth, max_args, max_len)
        except _TooLong:
            continue
        if min_len < length < max_len:
            before = len(seen)
            seen.setdefault(tree_to_string(tree), tree_value(tree))
            progress.update(len(seen) - before)
    progress.close()
    return list(seen.items())


def write_tsv(path: Path, rows: list[tuple[str, int]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        f.write(HEADER + "\n")
        for source, target in rows:
            f.write(f"{source}\t{target}\n")


def generate_listops(
    out_dir: str | Path, seed: int, n_train: int, n_val: int, n_test: int,
    min_len: int = 500, max_len: int = 2000, max_depth: int = 10, max_args: int = 10,
) -> Path:
    """Write ``out_dir/listops/basic_{train,val,test}.tsv`` (LRA layout, no duplicates across splits)."""
    rng = random.Random(seed)
    rows = sample_listops(rng, n_train + n_val + n_test, min_len, max_len, max_depth, max_args)
    folder = Path(out_dir) / "listops"
    write_tsv(folder / SPLIT_FILES["train"], rows[:n_train])
    write_tsv(folder / SPLIT_FILES["val"], rows[n_train : n_train + n_val])
    write_tsv(folder / SPLIT_FILES["test"], rows[n_train + n_val :])
    return folder


# ----------------------------------------------------------------------------- reader
def tokenize(source: str) -> list[str]:
    """LRA tokenisation: keep ``]`` as a token, drop ``(`` and ``)``, split on whitespace."""
    return source.replace("(", "").replace(")", "").split()  # as LRA does it, and fast in C


def read_tsv(path: Path) -> tuple[list[list[str]], np.ndarray]:
    """Token lists and labels of one split file; malformed rows name the file and line."""
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise DataError(str(path), f"cannot be read ({err})", "re-download or regenerate the file") from err
    if not lines or lines[0].strip() != HEADER:
        raise DataError(str(path), "line 1 is not the header 'Source<TAB>Target'", "use the file as released")
    tokens, labels = [], []
    for lineno, line in enumerate(bar(lines[1:], len(lines) - 1, f"reading {path.name}", "row"), start=2):
        if not line.strip():
            continue
        source, sep, target = line.rpartition("\t")
        if not sep or not target.strip().isdigit() or int(target) > 9:
            raise DataError(
                f"{path}:{lineno}",
                "expected '<expression><TAB><digit 0-9>' (row truncated or malformed)",
                "re-download or regenerate the file",
            )
        tokens.append(tokenize(source))
        labels.append(int(target))
    if not labels:
        raise DataError(str(path), "has a header but no rows", "re-download or regenerate the file")
    return tokens, np.asarray(labels, dtype=np.int64)


def build_vocab(train_tokens: list[list[str]]) -> tuple[str, ...]:
    return SPECIALS + tuple(sorted({tok for row in train_tokens for tok in row}))


def encode(tokens: list[list[str]], vocab: tuple[str, ...], seq_len: int, path: Path) -> np.ndarray:
    index = {tok: i for i, tok in enumerate(vocab)}
    rows = []
    for i, row in enumerate(tokens):
        try:
            rows.append(np.fromiter((index[t] for t in row), dtype=np.int64, count=len(row)))
        except KeyError as err:
            raise DataError(
                f"{path} (row {i + 1})",
                f"token {err.args[0]!r} does not occur in the training file, so it has no id",
                "check that the split files come from the same release",
            ) from err
    return pad_rows(rows, seq_len)


# ----------------------------------------------------------------------------- task
LAYOUT = SplitFileLayout(
    "listops", FOLDERS, SPLIT_FILES, "ListOps split file not found", "listops/basic_{train,val,test}.tsv"
)


def _generate_into_cache(request: TaskRequest) -> Path:
    params = generator_params(request, GENERATOR_KNOBS)
    key = {"v": GENERATOR_VERSION, **params}
    return ensure_generated("listops", key, lambda d: generate_listops(d, **params))


def resolve_files(request: TaskRequest) -> tuple[dict[str, Path], bool]:
    return LAYOUT.resolve(request, lambda: _generate_into_cache(request))


def check_available(request: TaskRequest) -> None:
    if will_generate(request):
        return  # generated on first load
    files, _ = resolve_files(request)
    with files["train"].open() as f:
        if f.readline().strip() != HEADER:
            raise DataError(str(files["train"]), "line 1 is not the header 'Source<TAB>Target'",
                            "use the LRA file as released")


def _build(files: dict[str, Path], max_len: int, source: str) -> TaskSplits:
    train_tokens, train_y = read_tsv(files["train"])
    vocab = build_vocab(train_tokens)
    seq_len = capped_len(train_tokens, max_len)
    train = ArraySplit(encode(train_tokens, vocab, seq_len, files["train"]), train_y)
    val_tokens, val_y = read_tsv(files["val"])
    val = ArraySplit(encode(val_tokens, vocab, seq_len, files["val"]), val_y)

    def load_test() -> ArraySplit:
        tokens, y = read_tsv(files["test"])
        return ArraySplit(encode(tokens, vocab, seq_len, files["test"]), y)

    info = TaskInfo(
        name="listops", input_kind="tokens", seq_len=seq_len, num_classes=10,
        vocab_size=len(vocab), pad_id=0, mask_id=1, vocab=vocab,
    )
    return TaskSplits(info, train, val, load_test, source=source)


def load(request: TaskRequest) -> TaskSplits:
    files, generated = resolve_files(request)
    return load_split_files("listops", request, files, generated, _build)


register(
    TaskDef(
        name="listops",
        description="LRA ListOps (nested list operations, 10 classes); generated offline without --data-dir",
        defaults={"max_len": 2000, "max_train": None,
                  **generator_options(min_len=50, max_len=300, max_depth=6, max_args=10)},
        load=load,
        check_available=check_available,
    )
)
