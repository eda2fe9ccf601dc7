"""Text (IMDb, byte level) and Retrieval (AAN pairs) readers on the official file formats."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sptune.errors import DataError
from sptune.tasks import TaskRequest, check_task, holdout, load_task
from sptune.tasks.retrieval import generate_retrieval

pytestmark = pytest.mark.usefixtures("offline_data_env")


def load(task, data_dir, **options):
    request = TaskRequest(task, options, 0, data_dir)
    check_task(request)
    return load_task(request)


def decode(row: np.ndarray) -> str:
    return bytes(int(t) - 4 for t in row if t != 0).decode("utf-8")


# ----------------------------------------------------------------------------- text
def write_imdb(root: Path, n_train: int = 6, n_test: int = 3) -> Path:
    for split, n in (("train", n_train), ("test", n_test)):
        for sub in ("pos", "neg"):
            folder = root / "aclImdb" / split / sub
            folder.mkdir(parents=True)
            for i in range(n):
                rating = 8 if sub == "pos" else 2
                (folder / f"{i}_{rating}.txt").write_text(f"{sub} review {i} café<br />", encoding="utf-8")
    return root


def test_imdb_bytes_labels_and_validation_from_train(tmp_path):
    splits = load("text", write_imdb(tmp_path), n_val=2, max_len=64)
    info = splits.info
    assert info.input_kind == "tokens" and info.vocab_size == 260 and info.vocab[:4][0] == "<pad>"
    assert (len(splits.train), len(splits.val)) == (10, 2)
    texts = [decode(row) for row in np.concatenate([splits.train.x, splits.val.x])]
    labels = np.concatenate([splits.train.y, splits.val.y])
    assert sorted(texts) == sorted(f"{s} review {i} café<br />" for s in ("pos", "neg") for i in range(6))
    assert all(t.startswith("pos") == bool(y) for t, y in zip(texts, labels, strict=True))
    assert splits.train.x.dtype.kind == "i" and splits.info.seq_len == len("pos review 0 café<br />".encode())
    assert set(splits.train.y[:4]) == {0, 1}, "train order is shuffled, so max_train keeps both labels"
    with pytest.raises(holdout.SealedSplitError):
        _ = splits.test
    with holdout.final_evaluation():
        assert len(splits.test) == 6


def test_imdb_truncates_to_max_len(tmp_path):
    splits = load("text", write_imdb(tmp_path), n_val=2, max_len=5)
    assert splits.train.x.shape == (10, 5)
    assert {decode(r) for r in splits.train.x} <= {"pos r", "neg r"}


def test_imdb_missing_folder_names_it(tmp_path):
    root = write_imdb(tmp_path)
    for f in (root / "aclImdb" / "test" / "neg").iterdir():
        f.unlink()
    (root / "aclImdb" / "test" / "neg").rmdir()
    with pytest.raises(DataError, match=r"aclImdb/test/neg"):
        check_task(TaskRequest("text", {}, 0, root))


def test_imdb_without_folder_or_hub_names_both_options(tmp_path, monkeypatch):
    import datasets.config

    # The env vars only count when datasets is first imported; pin the parsed flags as well.
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # an empty Hugging Face cache
    with pytest.raises(DataError) as err:
        check_task(TaskRequest("text", {}, 0, None))
    assert "aclImdb" in str(err.value) and "stanfordnlp/imdb" in str(err.value) and "HF_HUB_OFFLINE" in str(err.value)
    # A --data-dir of the user's own without aclImdb/: named, and the hub never asked.
    with pytest.raises(DataError) as err:
        check_task(TaskRequest("text", {}, 0, tmp_path))
    assert "aclImdb" in str(err.value) and "hub is not asked" in str(err.value)


# ----------------------------------------------------------------------------- retrieval
ROWS = {
    "train": ["1\tp1\tp2\tGraph parsing with beams.\tBeam search for graph parsing.",
              "0\tp3\tp4\tSpeech tagging.\tMachine translation of idioms, naïvely.",
              "1.0\tp5\tp6\tShort.\tAlso short."],
    "eval": ["0\tp7\tp8\tA.\tB."],
    "test": ["1\tp9\tp10\tC.\tD.", "0\tp11\tp12\tE.\tF."],
}


def write_aan(root: Path, rows=ROWS) -> Path:
    folder = root / "aan"
    folder.mkdir(parents=True, exist_ok=True)
    for split, lines in rows.items():
        (folder / f"new_aan_pairs.{split}.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def test_retrieval_pairs_shape_and_bytes(tmp_path):
    splits = load("retrieval", write_aan(tmp_path))
    assert splits.info.paired and splits.info.vocab_size == 260
    x = splits.train.x
    longest = max(len(t.encode()) for line in ROWS["train"] for t in line.split("\t")[3:])
    assert x.shape == (3, 2, longest) and x.dtype.kind == "i"
    assert decode(x[1, 1]) == "Machine translation of idioms, naïvely."
    assert list(splits.train.y) == [1, 0, 1]
    with holdout.final_evaluation():
        assert splits.test.x.shape == (2, 2, longest)


def test_retrieval_max_len_per_document(tmp_path):
    splits = load("retrieval", write_aan(tmp_path), max_len=6)
    assert splits.train.x.shape == (3, 2, 6)
    assert decode(splits.train.x[0, 0]) == "Graph "


def test_retrieval_truncated_row_names_file_and_line(tmp_path):
    rows = dict(ROWS, eval=["0\tp7\tp8\tA.\tB.", "1\tp9\tp10\tcut mid-r"])
    with pytest.raises(DataError, match=r"new_aan_pairs\.eval\.tsv:2"):
        load("retrieval", write_aan(tmp_path, rows))


def test_retrieval_bad_label_and_missing_file(tmp_path):
    rows = dict(ROWS, train=["x\tp1\tp2\tA.\tB."])
    with pytest.raises(DataError, match=r"new_aan_pairs\.train\.tsv:1"):
        load("retrieval", write_aan(tmp_path / "a", rows))
    root = write_aan(tmp_path / "b")
    (root / "aan" / "new_aan_pairs.test.tsv").unlink()
    with pytest.raises(DataError, match=r"new_aan_pairs\.test\.tsv.*not found"):
        check_task(TaskRequest("retrieval", {}, 0, root))


def test_retrieval_test_file_not_opened_before_final_evaluation(tmp_path):
    root = write_aan(tmp_path)
    (root / "aan" / "new_aan_pairs.test.tsv").write_text("only\ttwo fields\n")
    splits = load("retrieval", root)
    with pytest.raises(holdout.SealedSplitError):
        _ = splits.test
    with holdout.final_evaluation(), pytest.raises(DataError, match=r"test\.tsv:1"):
        _ = splits.test


def test_generated_retrieval_label_follows_shared_content(tmp_path):
    generate_retrieval(tmp_path, 0, 200, 20, 20)
    splits = load("retrieval", tmp_path)
    assert splits.train.y.mean() == 0.5

    def share_keyword(row) -> bool:
        # Topic keywords have 8+ letters, filler words at most 6: a pair is linked iff it shares one.
        a, b = ({w for w in decode(doc).strip(".").split() if len(w) >= 8} for doc in row)
        return bool(a & b)

    assert all(share_keyword(r) == bool(y) for r, y in zip(splits.train.x, splits.train.y, strict=True))


def test_retrieval_offline_default(tmp_path):
    splits = load("retrieval", None, gen_n_train=40, gen_n_val=6, gen_n_test=6)
    assert splits.source.startswith("generated ") and splits.train.x.shape[:2] == (40, 2)
    with pytest.raises(DataError, match="generate is false"):
        load("retrieval", None, generate=False)
