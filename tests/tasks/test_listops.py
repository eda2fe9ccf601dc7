"""ListOps: the LRA generator checked by an independent evaluator, and the official-format reader."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np
import pytest

from sptune.errors import DataError
from sptune.tasks import TaskRequest, check_task, holdout, load_task
from sptune.tasks.listops import generate_listops, tree_to_string
from sptune.tasks.prepared import preparing

OPS = {"[MIN", "[MAX", "[MED", "[SM"}


pytestmark = pytest.mark.usefixtures("offline_data_env")


# ----------------------------------------------------------------------------- independent evaluator
def parse_pairs(tokens: list[str]):
    """LRA's printed form is nested binary pairs '( A B )'; parse it back into pairs."""
    pos = 0

    def node():
        nonlocal pos
        tok = tokens[pos]
        pos += 1
        if tok != "(":
            return tok
        left, right = node(), node()
        assert tokens[pos] == ")", f"expected ')' at {pos}"
        pos += 1
        return (left, right)

    tree = node()
    assert pos == len(tokens), "trailing tokens"
    return tree


def evaluate(pairs):
    """Value, depth, operator count and arities of a pair tree, following LRA's to_value semantics."""
    stats = {"ops": 0, "arities": [], "max_depth": 0}

    def walk(t, depth):
        # A left spine of pairs ends at an operator: ( ( ( [OP a ) b ) ] ).
        if isinstance(t, str):
            assert t.isdigit() and len(t) == 1, t
            stats["max_depth"] = max(stats["max_depth"], depth)
            return int(t)
        spine, args = t, []
        assert spine[1] == "]", "an operator node must close with ']'"
        spine = spine[0]
        while isinstance(spine, tuple):
            args.append(spine[1])
            spine = spine[0]
        op = spine
        assert op in OPS, op
        args.reverse()
        stats["ops"] += 1
        stats["arities"].append(len(args))
        stats["max_depth"] = max(stats["max_depth"], depth)
        values = [walk(a, depth + 1) for a in args]
        if op == "[MIN":
            return min(values)
        if op == "[MAX":
            return max(values)
        if op == "[MED":
            return int(statistics.median(values))
        return sum(values) % 10

    value = walk(pairs, 1)
    return value, stats


def read_rows(path: Path) -> list[tuple[str, int]]:
    lines = path.read_text().splitlines()
    assert lines[0] == "Source\tTarget"
    return [(src, int(tgt)) for src, tgt in (line.split("\t") for line in lines[1:])]


def test_printed_format_is_left_nested_like_lra():
    assert tree_to_string(("[MAX", [2, 9])) == "( ( ( [MAX 2 ) 9 ) ] )"
    assert tree_to_string(("[SM", [("[MIN", [3, 4]), 5, 8])) == (
        "( ( ( ( [SM ( ( ( [MIN 3 ) 4 ) ] ) ) 5 ) 8 ) ] )"
    )


def test_generator_labels_match_independent_evaluation_and_bounds(tmp_path):
    min_len, max_len, max_depth, max_args = 20, 120, 5, 6
    folder = generate_listops(tmp_path, 7, 150, 30, 30, min_len, max_len, max_depth, max_args)
    seen = set()
    for split in ("train", "val", "test"):
        rows = read_rows(folder / f"basic_{split}.tsv")
        assert len(rows) == {"train": 150, "val": 30, "test": 30}[split]
        for source, label in rows:
            value, stats = evaluate(parse_pairs(source.split()))
            assert value == label
            tokens = source.split()
            assert tokens.count("]") == stats["ops"]
            length = 2 * stats["ops"] + sum(t.isdigit() for t in tokens)  # LRA: 2 per operator, 1 per digit
            assert min_len < length < max_len
            assert stats["max_depth"] <= max_depth
            assert all(2 <= a <= max_args for a in stats["arities"])
            seen.add(source)
    assert len(seen) == 210, "duplicates across splits"


def test_generator_is_deterministic_in_its_seed(tmp_path):
    a = generate_listops(tmp_path / "a", 3, 20, 5, 5, 10, 80, 4, 5)
    b = generate_listops(tmp_path / "b", 3, 20, 5, 5, 10, 80, 4, 5)
    c = generate_listops(tmp_path / "c", 4, 20, 5, 5, 10, 80, 4, 5)
    assert (a / "basic_train.tsv").read_text() == (b / "basic_train.tsv").read_text()
    assert (a / "basic_train.tsv").read_text() != (c / "basic_train.tsv").read_text()


def test_impossible_length_window_is_a_data_error(tmp_path):
    with pytest.raises(DataError, match="distinct trees"):
        generate_listops(tmp_path, 0, 50, 0, 0, min_len=1, max_len=4, max_depth=2, max_args=2)


# ----------------------------------------------------------------------------- reader
TRAIN = [("( ( ( [MAX 2 ) 9 ) ] )", 9), ("( ( ( ( [SM 4 ) ( ( ( [MIN 3 ) 8 ) ] ) ) 1 ) ] )", 8),
         ("( ( ( [MED 1 ) 7 ) ] )", 4), ("( ( ( [MIN 6 ) 0 ) ] )", 0)]
VAL = [("( ( ( [MAX 0 ) 1 ) ] )", 1)]
TEST = [("( ( ( [MIN 2 ) 3 ) ] )", 2), ("( ( ( [SM 9 ) 9 ) ] )", 8)]


def write_official(root: Path, train=TRAIN, val=VAL, test=TEST) -> Path:
    folder = root / "listops"
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train", train), ("val", val), ("test", test)):
        text = "Source\tTarget\n" + "".join(f"{s}\t{t}\n" for s, t in rows)
        (folder / f"basic_{name}.tsv").write_text(text)
    return root


def load(data_dir: Path | None, **options):
    request = TaskRequest("listops", options, 0, data_dir)
    check_task(request)
    return load_task(request)


def test_reader_keeps_closing_bracket_and_drops_parentheses(tmp_path):
    splits = load(write_official(tmp_path))
    info = splits.info
    assert info.input_kind == "tokens" and info.pad_id == 0 and info.mask_id == 1
    assert info.vocab[:4] == ("<pad>", "<mask>", "<cls>", "<eos>")
    assert info.vocab[4:] == tuple(sorted({t for s, _ in TRAIN for t in s.split()} - {"(", ")"}))
    assert "]" in info.vocab and "(" not in info.vocab and ")" not in info.vocab
    assert info.vocab_size == len(info.vocab)
    decoded = [info.vocab[i] for i in splits.train.x[1] if i != info.pad_id]
    assert decoded == ["[SM", "4", "[MIN", "3", "8", "]", "1", "]"]
    assert splits.train.x.dtype.kind == "i" and splits.train.x.shape == (4, 8)  # compact ints; longest train row
    assert list(splits.train.y) == [9, 8, 4, 0]
    assert (splits.train.x == info.vocab.index("]")).any(axis=1).all()


def test_vocabulary_identical_for_pretraining_and_finetuning_loads(tmp_path):
    root = write_official(tmp_path)
    pretrain = load(root)
    finetune = load(root, max_train=2)  # a finetune spec may subsample: ids must not move
    assert pretrain.info.vocab == finetune.info.vocab
    assert np.array_equal(pretrain.train.x[:2], finetune.train.x)
    with preparing():
        prepared = load(root)
    assert prepared.info.vocab == pretrain.info.vocab
    directory = Path(prepared.source.split("[prepared: ")[1].rstrip("]"))
    assert json.loads((directory / "vocab.json").read_text()) == list(pretrain.info.vocab)
    assert np.array_equal(load(root).train.x, pretrain.train.x)  # now memory-mapped from the cache


def test_max_len_truncates(tmp_path):
    splits = load(write_official(tmp_path), max_len=3)
    assert splits.info.seq_len == 3 and splits.train.x.shape == (4, 3)


def test_test_split_sealed_and_read_lazily(tmp_path):
    root = write_official(tmp_path)
    test_file = root / "listops" / "basic_test.tsv"
    test_file.write_text("garbage without header\n")  # proves load() never opens it
    splits = load(root)
    with pytest.raises(holdout.SealedSplitError):
        _ = splits.test
    with holdout.final_evaluation(), pytest.raises(DataError, match="basic_test.tsv"):
        _ = splits.test
    write_official(root)
    with holdout.final_evaluation():
        test = splits.test
    assert list(test.y) == [2, 8]


def test_missing_file_names_the_file(tmp_path):
    root = write_official(tmp_path)
    (root / "listops" / "basic_val.tsv").unlink()
    with pytest.raises(DataError, match=r"listops/basic_val\.tsv.*not found"):
        check_task(TaskRequest("listops", {}, 0, root))


def test_empty_data_dir_does_not_silently_generate(tmp_path):
    with pytest.raises(DataError, match=r"basic_train\.tsv"):
        load(tmp_path)


def test_truncated_row_names_file_and_line(tmp_path):
    root = write_official(tmp_path)
    path = root / "listops" / "basic_train.tsv"
    path.write_text(path.read_text() + "( ( ( [MAX 2 ) 9")  # cut mid-row, no label
    with pytest.raises(DataError, match=r"basic_train\.tsv:6"):
        load(root)


def test_missing_header_and_unknown_token(tmp_path):
    root = write_official(tmp_path)
    (root / "listops" / "basic_train.tsv").write_text("( ( ( [MAX 2 ) 9 ) ] )\t9\n")
    with pytest.raises(DataError, match="header"):
        load(root)
    write_official(root, val=[("( ( ( [FIRST 2 ) 9 ) ] )", 2)])
    with pytest.raises(DataError, match=r"basic_val\.tsv.*\[FIRST"):
        load(root)


def test_offline_default_generates_once_into_the_cache(tmp_path):
    small = {"gen_n_train": 60, "gen_n_val": 10, "gen_n_test": 10, "gen_min_len": 10, "gen_max_len": 60}
    first = load(None, **small)
    second = load(None, **small)
    assert first.source == second.source and first.source.startswith("generated ")
    assert str(tmp_path / "cache" / "generated") in first.source
    assert len(first.train) == 60 and len(first.val) == 10 and first.info.seq_len < 60
    assert np.array_equal(first.train.x, second.train.x)
    with holdout.final_evaluation():
        assert len(first.test) == 10
    with pytest.raises(DataError, match="generate is false"):
        load(None, generate=False)


def test_generated_and_official_paths_share_one_reader(tmp_path):
    generate_listops(tmp_path, 1, 30, 5, 5, 10, 60, 4, 5)
    splits = load(tmp_path)
    rows = read_rows(tmp_path / "listops" / "basic_train.tsv")
    assert list(splits.train.y) == [t for _, t in rows]
