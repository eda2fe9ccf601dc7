"""Task ``hf``: any Hugging Face ``datasets`` dataset, its columns mapped by the spec.

    task:
      name: hf
      source: ./my_ds                 # save_to_disk folder | data files | {parquet: [a.parquet]} | hub id
      input: text                     # text | image | tokens
      input_column: text
      pair_column: null               # a second input column: a paired task (x is (N, 2, L))
      label_column: label             # whole numbers, booleans, a ClassLabel or class names
      splits: {train: train, test: test}   # validation: carved from train unless named
      validation_fraction: 0.1
      max_length: 1024                # text / tokens: rows cut here (counted in results.json)
      vocab: bytes                    # bytes | char | word

Where the data come from and which rows each split takes: `sptune.tasks.hf_source`; how columns become arrays:
`sptune.tasks.hf_columns`. The test split stays sealed: only its schema and row count are read before the final
evaluation. Class names, columns, splits and truncation counts go to ``TaskSplits.details`` (results.json and the
MLflow parent run).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from sptune.errors import SpecError
from sptune.tasks.arrays import capped_len, limit_train
from sptune.tasks.base import ArraySplit, TaskInfo, TaskSplits
from sptune.tasks.hf_columns import (
    SPECIALS,
    Labels,
    Vocabulary,
    build_vocabulary,
    check_input,
    check_label,
    encode_images,
    feature_kind,
    label_mapping,
    stack_rows,
)
from sptune.tasks.hf_source import FORMATS, Opened, Part, choose_parts, open_source, rows_of
from sptune.tasks.option_rules import Option
from sptune.tasks.registry import TaskDef, TaskRequest, register

DEFAULTS: dict[str, Any] = {
    "source": None,
    "subset": None,
    "input": "text",
    "input_column": "text",
    "pair_column": None,
    "label_column": "label",
    "splits": None,
    "validation_fraction": 0.1,
    "max_length": 1024,
    "vocab": "bytes",
    "max_vocab": None,
    "vocab_size": None,
    "color": "gray",
    "side": None,
    "num_classes": None,
    "max_train": None,
}
RULES = {
    "source": Option(
        object,
        nullable=True,
        null_means="not set: the task asks for one",
        means=f"a path, an fsspec URI, {{{'|'.join(FORMATS)}: FILES}} or a hub id",
    ),
    "subset": Option(str, nullable=True, null_means="the dataset's default configuration"),
    "input": Option(str, choices=("text", "image", "tokens")),
    "input_column": Option(str),
    "pair_column": Option(str, nullable=True, null_means="one input per example"),
    "label_column": Option(str),
    "splits": Option(
        object,
        nullable=True,
        means="a mapping of train, validation, test to split names",
        null_means="train, test, and validation when the dataset has one",
    ),
    "validation_fraction": Option(float, low=0, high=1, low_open=True),
    "max_length": Option(int, low=1),
    "vocab": Option(str, choices=("bytes", "char", "word")),
    "max_vocab": Option(int, low=1, nullable=True, null_means="every token of the training rows"),
    "vocab_size": Option(int, low=1, nullable=True, null_means="one more than the largest training id"),
    "color": Option(str, choices=("gray", "rgb")),
    "side": Option(int, low=1, nullable=True, null_means="the images' own side"),
    "num_classes": Option(int, low=2, nullable=True, null_means="from the label column"),
}


@dataclass(frozen=True)
class Plan:
    """A request checked against the dataset's schema: the opened source, each role's rows, the input columns."""

    opened: Opened
    parts: dict[str, Part]
    columns: tuple[str, ...]  # the input column, then the pair column if any
    label: str


def _plan(request: TaskRequest) -> Plan:
    """Everything the dry run can refuse, from the dataset's features and row counts only (no values read)."""
    if request.option("source") is None:
        raise SpecError(
            "task.source",
            "task hf needs a source",
            "set task.source to a save_to_disk folder, data "
            "files ({parquet: [FILE, ...]}, arrow, csv, json) or a hub id",
        )
    input_kind = request.option("input")
    if request.option("pair_column") and input_kind == "image":
        raise SpecError(
            "task.pair_column", "pairs of images are not supported", "drop pair_column, or use text or token inputs"
        )
    opened = open_source(request.option("source"), request.data_dir, request.option("subset"))
    parts = choose_parts(opened, request.option("splits"), float(request.option("validation_fraction")), request.seed)
    columns = tuple(c for c in (request.option("input_column"), request.option("pair_column")) if c)
    label = request.option("label_column")
    for role, part in parts.items():
        for split in dict(part.pieces):
            features = opened.splits[split].features
            for field, column in (("input_column", columns[0]), ("pair_column", columns[-1]), ("label_column", label)):
                if field == "pair_column" and len(columns) == 1:
                    continue
                if column not in features:
                    raise SpecError(
                        f"task.{field}",
                        f"no column '{column}' in split '{split}' ({role}) of "
                        f"{opened.where}; its columns: {', '.join(features)}",
                        f"set task.{field} to one of: {', '.join(features)}",
                    )
            for column in columns:
                check_input("column", column, features[column], input_kind)
            check_label(label, features[label])
    return Plan(opened, parts, columns, label)


def check_available(request: TaskRequest) -> None:
    _plan(request)


@dataclass(frozen=True)
class Encoders:
    """What the training rows fix for every split: the vocabulary (text, tokens), the image side, the labels."""

    vocabulary: Vocabulary | None
    side: int | None
    labels: Labels
    seq_len: int


def _column(dataset: Any, name: str) -> list[Any]:
    return list(dataset[name])


def _inputs(request: TaskRequest, plan: Plan, dataset: Any, enc: Encoders, where: str) -> tuple[np.ndarray, int]:
    """x of one split, and how many of its inputs were cut at the task's length."""
    if request.option("input") == "image":
        x, _ = encode_images(_column(dataset, plan.columns[0]), request.option("color"), enc.side, where)
        return x, 0
    return stack_rows([enc.vocabulary.encode(_column(dataset, c)) for c in plan.columns], enc.seq_len)


def _encoders(request: TaskRequest, plan: Plan, train: Any, val: Any) -> tuple[Encoders, np.ndarray]:
    """Fixed from the training rows (validation labels count toward the number of classes); and x of train."""
    kind = request.option("input")
    features = train.features
    labels_seen = np.asarray([], dtype=np.int64)
    if kind == "image":
        x, side = encode_images(
            _column(train, plan.columns[0]), request.option("color"), request.option("side"), "train split"
        )
        vocabulary, seq_len = None, x.shape[1]
    else:
        vocab_kind = "ids" if kind == "tokens" else request.option("vocab")
        train_values = [v for c in plan.columns for v in _column(train, c)]
        vocabulary = build_vocabulary(
            vocab_kind, train_values, request.option("max_vocab"), request.option("vocab_size")
        )
        rows = vocabulary.encode(train_values)
        seq_len, side, x = capped_len(rows, int(request.option("max_length"))), None, None
    if feature_kind(features[plan.label]) in ("int", "bool"):
        labels_seen = np.concatenate([np.asarray(_column(d, plan.label), dtype=np.int64) for d in (train, val)])
    labels = label_mapping(features[plan.label], _column(train, plan.label), labels_seen, request.option("num_classes"))
    return Encoders(vocabulary, side, labels, seq_len), x


def _split(
    request: TaskRequest, plan: Plan, role: str, enc: Encoders, details: dict[str, Any], x: np.ndarray | None = None
) -> ArraySplit:
    dataset = rows_of(plan.opened, plan.parts[role])
    where = f"{plan.opened.where} ({role}: {plan.parts[role].written})"
    truncated = 0
    if x is None or request.option("input") != "image":  # text rows of train were encoded untruncated only
        x, truncated = _inputs(request, plan, dataset, enc, where)
    details["truncated"][role] = truncated
    return ArraySplit(x, enc.labels.encode(_column(dataset, plan.label), f"{where}, column '{plan.label}'"))


def load(request: TaskRequest) -> TaskSplits:
    plan = _plan(request)
    train_rows, val_rows = (rows_of(plan.opened, plan.parts[r]) for r in ("train", "validation"))
    enc, train_x = _encoders(request, plan, train_rows, val_rows)
    details = _details(request, plan, enc)
    train = _split(request, plan, "train", enc, details, train_x)
    val = _split(request, plan, "validation", enc, details)
    load_test: Callable[[], ArraySplit] = lambda: _split(request, plan, "test", enc, details)  # noqa: E731
    splits = TaskSplits(_info(request, plan, enc), train, val, load_test, source=plan.opened.where, details=details)
    return limit_train(splits, request.option("max_train"))


def _info(request: TaskRequest, plan: Plan, enc: Encoders) -> TaskInfo:
    classes = enc.labels.num_classes
    if request.option("input") == "image":
        return TaskInfo(
            name="hf",
            input_kind="continuous",
            seq_len=enc.seq_len,
            num_classes=classes,
            levels=256,
            image_side=enc.side or 0,
        )
    table = enc.vocabulary.table
    return TaskInfo(
        name="hf",
        input_kind="tokens",
        seq_len=enc.seq_len,
        num_classes=classes,
        vocab_size=len(table),
        pad_id=0,
        mask_id=1,
        paired=len(plan.columns) == 2,
        vocab=table,
    )


def _details(request: TaskRequest, plan: Plan, enc: Encoders) -> dict[str, Any]:
    details: dict[str, Any] = {
        "source": plan.opened.where,
        "columns": {"input": list(plan.columns), "label": plan.label},
        "splits": {role: part.written for role, part in plan.parts.items()},
        "rows": {role: len(part) for role, part in plan.parts.items()},
    }
    if enc.labels.names:
        details["label_names"] = {str(i): name for i, name in enumerate(enc.labels.names)}
    if request.option("input") == "image":
        details["image"] = {"side": enc.side, "color": request.option("color")}
    else:
        details["max_length"] = int(request.option("max_length"))
        details["seq_len"] = enc.seq_len
        details["vocab"] = {
            "kind": enc.vocabulary.kind,
            "size": len(enc.vocabulary.table),
            "specials": list(SPECIALS) if enc.vocabulary.kind != "bytes" else None,
        }
    details["truncated"] = {}
    return details


register(
    TaskDef(
        name="hf",
        description="any Hugging Face datasets dataset: a save_to_disk folder, parquet/arrow/csv/json files, "
        "or a hub id; columns mapped by the spec",
        defaults=DEFAULTS,
        load=load,
        check_available=check_available,
        rules=RULES,
    )
)
