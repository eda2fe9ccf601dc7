"""The arrays task on npz files and .npy folders the tests write: the layout, token ids and levels, validation
carved or given, the test split sealed and checked against the contract, bad layouts refused naming the key."""

from __future__ import annotations

import numpy as np
import pytest

from sptune.errors import DataError, SpecError
from sptune.tasks import TaskRequest, check_task, holdout, load_task
from sptune.tasks.hf_columns import SPECIALS


def _arrays(seed: int = 0, n: int = 60, length: int = 10, high: int = 8) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"x_train": rng.integers(0, high, (n, length)), "y_train": rng.integers(0, 3, n),
            "x_test": rng.integers(0, high, (20, length)), "y_test": rng.integers(0, 3, 20)}  # fmt: skip


def _load(options: dict, data_dir=None, seed: int = 0):
    request = TaskRequest("arrays", options, seed, data_dir)
    check_task(request)
    return load_task(request)


def test_npz_and_npy_folder_read_the_same(tmp_path):
    arrays = _arrays()
    np.savez(tmp_path / "mine.npz", **arrays)
    (tmp_path / "folder").mkdir()
    for key, value in arrays.items():
        np.save(tmp_path / "folder" / f"{key}.npy", value)
    a = _load({"path": "mine.npz", "input": "tokens"}, data_dir=tmp_path)
    b = _load({"input": "tokens"}, data_dir=tmp_path / "folder")
    assert a.train.fingerprint() == b.train.fingerprint() and a.val.fingerprint() == b.val.fingerprint()
    with holdout.final_evaluation():
        assert a.test.fingerprint() == b.test.fingerprint()


def test_token_ids_are_shifted_past_the_specials_with_the_pad_id_mapped(tmp_path):
    arrays = _arrays()
    np.savez(tmp_path / "t.npz", **arrays)
    splits = _load({"path": str(tmp_path / "t.npz"), "input": "tokens", "pad_id": 0})
    assert splits.info.input_kind == "tokens" and splits.info.vocab_size == len(SPECIALS) + 8
    assert len(splits.train) + len(splits.val) == 60 and len(splits.val) == 6
    raw = {tuple(r) for r in arrays["x_train"]}
    row = splits.train.x[0].astype(np.int64)
    back = np.where(row == 0, 0, row - len(SPECIALS))
    assert tuple(back) in raw  # pad id 0 -> <pad> 0, every other id + 3
    with holdout.final_evaluation():
        test = splits.test
    expected = np.where(arrays["x_test"] == 0, 0, arrays["x_test"] + len(SPECIALS))
    assert np.array_equal(test.x, expected)


def test_continuous_levels_images_and_a_given_validation_split(tmp_path):
    rng = np.random.default_rng(1)
    arrays = {"x_train": rng.integers(0, 17, (40, 4, 4)).astype(np.uint8), "y_train": rng.integers(0, 2, 40),
              "x_val": rng.integers(0, 17, (10, 4, 4)).astype(np.uint8), "y_val": rng.integers(0, 2, 10),
              "x_test": rng.integers(0, 17, (10, 4, 4)).astype(np.uint8), "y_test": rng.integers(0, 2, 10)}  # fmt: skip
    np.savez(tmp_path / "c.npz", **arrays)
    splits = _load({"path": str(tmp_path / "c.npz"), "input": "continuous", "levels": 17})
    info = splits.info
    assert (info.input_kind, info.seq_len, info.levels, info.image_side) == ("continuous", 16, 17, 4)
    assert np.array_equal(splits.val.x, arrays["x_val"].reshape(10, -1))
    assert splits.details["validation"] == "x_val"


def test_the_test_split_is_sealed_and_checked_when_read(tmp_path):
    arrays = _arrays()
    arrays["y_test"] = np.full(20, 7)  # beyond the 3 classes of train and val
    np.savez(tmp_path / "t.npz", **arrays)
    splits = _load({"path": str(tmp_path / "t.npz"), "input": "tokens"})
    with pytest.raises(holdout.SealedSplitError):
        _ = splits.test
    with holdout.final_evaluation(), pytest.raises(DataError, match="labels run 7..7"):
        _ = splits.test


@pytest.mark.parametrize(
    ("change", "options", "text"),
    [
        ({"drop": "y_test"}, {}, "has no array y_test"),
        ({"drop": "x_train"}, {}, "has no array x_train"),
        ({"add": {"x_val": np.zeros((5, 10), np.int64)}}, {}, "has no array y_val"),
        ({"add": {"x_valid": np.zeros((5, 10), np.int64)}}, {}, "holds array x_valid"),
        ({"set": {"y_train": np.zeros(60) + 0.5}}, {}, "whole-number label"),
        ({"set": {"x_test": np.zeros((20, 11), np.int64)}}, {}, "x_train's are (10,)"),
        ({"set": {"x_train": np.zeros((59, 10), np.int64)}}, {}, "for 60 labels"),
        ({"set": {"x_train": np.zeros((60, 10)) + 0.5}}, {}, "whole numbers"),
        ({}, {"input": None}, "say what x holds"),
    ],
)
def test_bad_layouts_are_refused_at_the_check_naming_the_key(tmp_path, change, options, text):
    arrays = _arrays()
    for key in [change["drop"]] if "drop" in change else []:
        arrays.pop(key)
    arrays.update(change.get("add", {}))
    arrays.update(change.get("set", {}))
    np.savez(tmp_path / "bad.npz", **arrays)
    request = TaskRequest("arrays", {"path": str(tmp_path / "bad.npz"), "input": "tokens", **options})
    if options.get("input", "tokens") is None:
        request = TaskRequest("arrays", {"path": str(tmp_path / "bad.npz")})
    with pytest.raises((DataError, SpecError)) as err:
        check_task(request)
    assert text in err.value.problem, err.value


def test_the_check_reads_headers_only(tmp_path, monkeypatch):
    np.savez(tmp_path / "t.npz", **_arrays())
    monkeypatch.setattr(np, "load", lambda *a, **k: pytest.fail("read array values"))
    check_task(TaskRequest("arrays", {"path": str(tmp_path / "t.npz"), "input": "tokens"}))


def test_a_given_vocab_size_below_the_ids_is_refused(tmp_path):
    np.savez(tmp_path / "t.npz", **_arrays())
    with pytest.raises(DataError, match="not below task.vocab_size 5"):
        _load({"path": str(tmp_path / "t.npz"), "input": "tokens", "vocab_size": 5})
