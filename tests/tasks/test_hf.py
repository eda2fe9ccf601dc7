"""The hf task on datasets the tests write (save_to_disk, parquet, csv, json): every source form reads the same
arrays, columns map as the spec says, splits never overlap, the test split stays sealed, and no source on disk
reaches the network."""

from __future__ import annotations

import socket

import datasets
import numpy as np
import pytest
from PIL import Image

from sptune.errors import DataError, SpecError
from sptune.tasks import TaskRequest, check_task, holdout, load_task
from sptune.tasks.hf_columns import SPECIALS

WORDS = ("good", "fine", "bad", "poor", "film", "plot", "the", "a")


def _texts(n: int, seed: int) -> tuple[list[str], list[str]]:
    rng = np.random.default_rng(seed)
    texts = [" ".join(rng.choice(WORDS, int(rng.integers(2, 12)))) for _ in range(n)]
    return texts, [
        "pos" if t.count("good") + t.count("fine") >= t.count("bad") + t.count("poor") else "neg" for t in texts
    ]


@pytest.fixture(autouse=True)
def _own_hf_cache(tmp_path, monkeypatch):
    """datasets converts data files into its cache: one per test, not the user's."""
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))


@pytest.fixture
def text_dataset() -> datasets.DatasetDict:
    train, test = _texts(120, 0), _texts(40, 1)
    return datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict({"text": train[0], "label": train[1]}),
            "test": datasets.Dataset.from_dict({"text": test[0], "label": test[1]}),
        }
    )


def _load(options: dict, seed: int = 0, data_dir=None):
    request = TaskRequest("hf", options, seed, data_dir)
    check_task(request)
    return load_task(request)


def _test(splits):
    with holdout.final_evaluation():
        return splits.test


def _fingerprints(splits) -> tuple[str, str, str]:
    return splits.train.fingerprint(), splits.val.fingerprint(), _test(splits).fingerprint()


def test_every_source_form_reads_the_same_arrays(tmp_path, text_dataset):
    text_dataset.save_to_disk(str(tmp_path / "disk"))
    (tmp_path / "files").mkdir()
    for split, ds in text_dataset.items():
        ds.to_parquet(str(tmp_path / "files" / f"{split}.parquet"))
        ds.to_csv(str(tmp_path / f"{split}.csv"), index=False)
        ds.to_json(str(tmp_path / f"{split}.jsonl"))
    sources = [
        str(tmp_path / "disk"),
        {"parquet": {"train": str(tmp_path / "files/train.parquet"), "test": str(tmp_path / "files/test.parquet")}},
        str(tmp_path / "files"),
        {"csv": {"train": "train.csv", "test": "test.csv"}},  # relative: under --data-dir
        {"json": {"train": "train.jsonl", "test": "test.jsonl"}},
    ]
    found = [_fingerprints(_load({"source": s, "vocab": "word"}, data_dir=tmp_path)) for s in sources]
    assert len(set(found)) == 1, found


def test_sources_on_disk_never_touch_the_network(tmp_path, text_dataset, monkeypatch):
    text_dataset.save_to_disk(str(tmp_path / "disk"))
    text_dataset["train"].to_parquet(str(tmp_path / "train.parquet"))
    text_dataset["test"].to_parquet(str(tmp_path / "test.parquet"))

    def no_network(*args, **kwargs):
        raise AssertionError(f"network call {args[:2]}")

    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    for source in (
        str(tmp_path / "disk"),
        {"parquet": {"train": str(tmp_path / "train.parquet"), "test": str(tmp_path / "test.parquet")}},
    ):
        assert len(_load({"source": source}).train) == 108


def test_class_names_map_to_sorted_ids_recorded_in_details(tmp_path, text_dataset):
    text_dataset.save_to_disk(str(tmp_path / "d"))
    splits = _load({"source": str(tmp_path / "d")})
    assert splits.details["label_names"] == {"0": "neg", "1": "pos"}
    assert splits.info.num_classes == 2
    texts = list(text_dataset["train"]["text"])
    labels = list(text_dataset["train"]["label"])
    # Row 0 of train (after the carve) is some training text: its label id is its name's index.
    first = bytes(int(i) - 4 for i in splits.train.x[0] if i).decode()
    assert splits.train.y[0] == ["neg", "pos"].index(labels[texts.index(first)])


def test_class_label_names_and_int_labels(tmp_path):
    feature = datasets.Features(
        {"text": datasets.Value("string"), "label": datasets.ClassLabel(names=["cat", "dog", "eel"])}
    )
    ds = datasets.Dataset.from_dict({"text": ["a", "b", "c", "d"] * 10, "label": [0, 1, 2, 1] * 10}, features=feature)
    datasets.DatasetDict({"train": ds, "test": ds}).save_to_disk(str(tmp_path / "cl"))
    splits = _load({"source": str(tmp_path / "cl")})
    assert splits.details["label_names"] == {"0": "cat", "1": "dog", "2": "eel"} and splits.info.num_classes == 3
    plain = datasets.Dataset.from_dict({"text": ["a", "b"] * 10, "label": [0, 3] * 10})
    datasets.DatasetDict({"train": plain, "test": plain}).save_to_disk(str(tmp_path / "ints"))
    splits = _load({"source": str(tmp_path / "ints")})
    assert splits.info.num_classes == 4 and "label_names" not in splits.details


def test_char_and_word_vocabularies_come_from_training_rows_only(tmp_path):
    train = datasets.Dataset.from_dict({"text": ["ab ab", "ba"] * 10, "label": [0, 1] * 10})
    test = datasets.Dataset.from_dict({"text": ["zz ab"], "label": [0]})
    datasets.DatasetDict({"train": train, "test": test}).save_to_disk(str(tmp_path / "v"))
    chars = _load({"source": str(tmp_path / "v"), "vocab": "char"})
    assert chars.info.vocab == SPECIALS + ("a", "b", " ")  # by count, then character
    words = _load({"source": str(tmp_path / "v"), "vocab": "word"})
    assert words.info.vocab == SPECIALS + ("ab", "ba")
    unk = SPECIALS.index("<unk>")
    assert _test(words).x[0].tolist()[:2] == [unk, 3]  # "zz" never seen in training


def test_truncation_is_counted_per_split(tmp_path):
    train = datasets.Dataset.from_dict({"text": ["x" * 30, "y" * 5] * 10, "label": [0, 1] * 10})
    test = datasets.Dataset.from_dict({"text": ["z" * 50, "z"], "label": [0, 1]})
    datasets.DatasetDict({"train": train, "test": test}).save_to_disk(str(tmp_path / "t"))
    splits = _load({"source": str(tmp_path / "t"), "max_length": 10})
    assert splits.info.seq_len == 10
    assert splits.details["truncated"]["train"] == int((splits.train.y == 0).sum())  # the 30-character rows
    assert splits.details["truncated"]["validation"] == int((splits.val.y == 0).sum())
    _test(splits)
    assert splits.details["truncated"]["test"] == 1


def test_validation_is_carved_from_train_with_the_spec_seed(tmp_path, text_dataset):
    text_dataset.save_to_disk(str(tmp_path / "d"))
    a, b = _load({"source": str(tmp_path / "d")}, seed=1), _load({"source": str(tmp_path / "d")}, seed=2)
    assert len(a.val) == 12 and len(a.train) == 108
    assert a.val.fingerprint() != b.val.fingerprint()
    assert len(a.train) + len(a.val) == 120
    assert a.details["splits"]["validation"] == "0.1 of train (seed 1)"


def test_named_and_sliced_splits(tmp_path, text_dataset):
    text_dataset.save_to_disk(str(tmp_path / "d"))
    splits = _load(
        {
            "source": str(tmp_path / "d"),
            "splits": {"train": "train[:100]", "validation": "train[100:]", "test": "test[:10]"},
        }
    )
    assert (len(splits.train), len(splits.val), len(_test(splits))) == (100, 20, 10)


def test_overlapping_splits_are_refused_naming_the_role(tmp_path, text_dataset):
    text_dataset.save_to_disk(str(tmp_path / "d"))
    with pytest.raises(SpecError) as err:
        _load({"source": str(tmp_path / "d"), "splits": {"train": "train[:80%]", "validation": "train[70%:]"}})
    assert err.value.where == "task.splits.validation" and "shares 12 rows" in err.value.problem


def test_the_test_split_stays_sealed(tmp_path, text_dataset):
    text_dataset.save_to_disk(str(tmp_path / "d"))
    splits = _load({"source": str(tmp_path / "d")})
    with pytest.raises(holdout.SealedSplitError):
        _ = splits.test


def test_images_gray_rgb_pooled_and_resized(tmp_path):
    rng = np.random.default_rng(0)
    pixels = rng.integers(0, 256, (20, 8, 8, 3), dtype=np.uint8)
    ds = datasets.Dataset.from_dict({"img": [Image.fromarray(p) for p in pixels], "y": [0, 1] * 10})
    ds = ds.cast_column("img", datasets.Image())
    datasets.DatasetDict({"train": ds, "test": ds}).save_to_disk(str(tmp_path / "im"))
    base = {
        "source": str(tmp_path / "im"),
        "input": "image",
        "input_column": "img",
        "label_column": "y",
        "splits": {"train": "train[:16]", "validation": "train[16:]", "test": "test"},
    }
    gray = _load(base)
    assert (gray.info.seq_len, gray.info.image_side, gray.info.input_kind) == (64, 8, "continuous")
    expected = np.asarray(Image.fromarray(pixels[0]).convert("L")).reshape(-1)
    assert np.array_equal(gray.train.x[0], expected)
    rgb = _load({**base, "color": "rgb", "side": 4})
    assert rgb.info.seq_len == 48 and rgb.info.image_side == 4
    red_pooled = np.rint(pixels[0, ..., 0].reshape(4, 2, 4, 2).mean(axis=(1, 3))).reshape(-1)
    assert np.array_equal(rgb.train.x[0][:16], red_pooled)  # the red plane first
    assert _load({**base, "side": 3}).info.seq_len == 9  # 3 does not divide 8: resized


def test_token_ids_and_pairs(tmp_path):
    ds = datasets.Dataset.from_dict(
        {"ids": [[1, 2, 3], [4, 5], [0]] * 6, "other": [[7], [8, 9], [1]] * 6, "label": [0, 1, 0] * 6}
    )
    datasets.DatasetDict({"train": ds, "test": ds}).save_to_disk(str(tmp_path / "tok"))
    base = {"source": str(tmp_path / "tok"), "input": "tokens", "input_column": "ids"}
    single = _load(base)
    assert single.info.vocab_size == len(SPECIALS) + 6 and single.info.seq_len == 3  # ids 0..5, shifted
    assert sorted(set(single.train.x[single.train.x > 0].tolist())) == [i + len(SPECIALS) for i in range(6)]
    paired = _load({**base, "pair_column": "other"})
    assert paired.info.paired and paired.train.x.shape[1:] == (2, 3) and paired.info.vocab_size == len(SPECIALS) + 10


@pytest.mark.parametrize(
    ("options", "where", "text"),
    [
        ({"label_column": "stars"}, "task.label_column", "its columns: text, label, score"),
        ({"input_column": "body"}, "task.input_column", "no column 'body'"),
        ({"label_column": "score"}, "task.label_column", "float labels"),
        ({"input": "image"}, "task.input", "holds text"),
        ({"splits": {"test": "tset"}}, "task.splits.test", "'tset' is not a split"),
        ({"splits": {"train": "train", "validation": "train"}}, "task.splits.validation", "shares"),
        ({"splits": {"dev": "train"}}, "task.splits.dev", "not a role"),
        ({"source": {"xlsx": ["a.xlsx"]}}, "task.source", "one key, the file format"),
    ],
)
def test_mapping_mistakes_are_refused_before_loading(tmp_path, options, where, text):
    ds = datasets.Dataset.from_dict({"text": ["a", "b"] * 5, "label": [0, 1] * 5, "score": [0.5, 1.5] * 5})
    datasets.DatasetDict({"train": ds, "test": ds}).save_to_disk(str(tmp_path / "d"))
    request = TaskRequest("hf", {"source": str(tmp_path / "d"), **options})
    with pytest.raises((SpecError, DataError)) as err:
        check_task(request)
    assert err.value.where == where and text in err.value.problem, err.value


def test_a_missing_local_path_is_never_asked_of_the_hub(tmp_path, monkeypatch):
    monkeypatch.setattr("sptune.tasks.hf_source.load_hub_dataset", lambda *a, **k: pytest.fail("asked the hub"))
    with pytest.raises(DataError, match="no such file or folder"):
        check_task(TaskRequest("hf", {"source": "./nowhere"}, data_dir=tmp_path))
    with pytest.raises(DataError, match="no such file"):
        check_task(TaskRequest("hf", {"source": {"parquet": ["missing.parquet"]}}, data_dir=tmp_path))


def test_a_hub_id_offline_and_uncached_is_refused_at_once(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    with pytest.raises(DataError) as err:
        check_task(TaskRequest("hf", {"source": "someone/some-dataset"}))
    assert "HF_HUB_OFFLINE is set" in err.value.problem and "not in the Hugging Face cache" in err.value.problem
