"""Bit memory and bit XOR: labels checked by decoding the token sequences independently."""

from __future__ import annotations

import numpy as np
import pytest

from sptune.errors import DataError
from sptune.tasks import TaskRequest, check_task, holdout, load_task
from sptune.tasks.bits import generate_bits_files

pytestmark = pytest.mark.usefixtures("offline_data_env")


def load(task, data_dir=None, **options):
    request = TaskRequest(task, options, 0, data_dir)
    check_task(request)
    return load_task(request)


def blocks(row: np.ndarray, vocab: tuple[str, ...]) -> list[str]:
    return "".join(vocab[t] for t in row).split("|")


def test_bit_memory_label_is_the_string_the_masked_copy_came_from():
    splits = load("bit_memory", n_bits=16, n_train=200, n_val=20, n_test=20)
    info = splits.info
    assert info.num_classes == 5 and info.seq_len == 6 * 16 + 5 and info.vocab[:2] == ("<pad>", "<mask>")
    hidden = []
    for row, label in zip(splits.train.x, splits.train.y, strict=True):
        *strings, query = blocks(row, info.vocab)
        assert len(strings) == 5 and all(len(s) == 16 for s in strings + [query])
        fits = [all(q in ("?", b) for q, b in zip(query, s, strict=True)) for s in strings]
        matches = [k for k, ok in enumerate(fits) if ok]
        assert label in matches
        hidden.append(query.count("?") / 16)
    assert 0.4 < np.mean(hidden) < 0.6
    assert np.bincount(splits.train.y, minlength=5).min() > 20


def test_bit_xor_label_is_the_xor_as_a_number_and_inputs_never_repeat():
    splits = load("bit_xor")
    info = splits.info
    assert info.num_classes == 32 and info.seq_len == 11
    with holdout.final_evaluation():
        test = splits.test
    seen = set()
    for part in (splits.train, splits.val, test):
        for row, label in zip(part.x, part.y, strict=True):
            a, b = blocks(row, info.vocab)
            assert int(a, 2) ^ int(b, 2) == label
            seen.add((a, b))
    assert len(seen) == len(splits.train) + len(splits.val) + len(test)


def test_bit_xor_impossible_size_is_a_data_error():
    with pytest.raises(DataError, match="distinct inputs"):
        check_task(TaskRequest("bit_xor", {"n_bits": 2, "n_train": 20}))


def test_generation_is_seeded_and_test_is_sealed():
    a, b = load("bit_memory", n_train=50), load("bit_memory", n_train=50)
    c = load("bit_memory", n_train=50, data_seed=1)
    assert np.array_equal(a.train.x, b.train.x) and not np.array_equal(a.train.x, c.train.x)
    with pytest.raises(holdout.SealedSplitError):
        _ = a.test


def test_files_written_by_generate_read_back_identically(tmp_path):
    generate_bits_files(tmp_path, seed=0, n_train=40, n_val=5, n_test=5)
    for task in ("bit_memory", "bit_xor"):
        from_files = load(task, tmp_path)
        in_memory = load(task, n_train=40, n_val=5, n_test=5)
        assert from_files.source.endswith("bits")
        assert np.array_equal(from_files.train.x, in_memory.train.x)
        assert np.array_equal(from_files.val.y, in_memory.val.y)
        with holdout.final_evaluation():
            assert np.array_equal(from_files.test.x, in_memory.test.x)


def test_truncated_bits_file_names_file_and_line(tmp_path):
    generate_bits_files(tmp_path, seed=0, n_train=10, n_val=5, n_test=5, tasks=("bit_xor",))
    path = tmp_path / "bits" / "bit_xor_train.tsv"
    path.write_text(path.read_text() + "0 1 |")
    with pytest.raises(DataError, match=r"bit_xor_train\.tsv:12"):
        load("bit_xor", tmp_path)
    (tmp_path / "bits" / "bit_xor_val.tsv").unlink()
    with pytest.raises(DataError, match=r"bit_xor_val\.tsv"):
        check_task(TaskRequest("bit_xor", {}, 0, tmp_path))


def test_files_with_other_widths_set_their_own_class_count(tmp_path):
    generate_bits_files(tmp_path, seed=0, n_train=30, n_val=5, n_test=5, n_bits=4)
    xor = load("bit_xor", tmp_path)
    assert (xor.info.seq_len, xor.info.num_classes) == (9, 16)
    assert load("bit_memory", tmp_path).info.num_classes == 5
