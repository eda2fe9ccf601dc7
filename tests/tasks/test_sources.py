"""Shared pieces of the file-based tasks (`sptune.tasks.sources`)."""

from __future__ import annotations

import pytest

from sptune.errors import DataError
from sptune.tasks import TaskRequest, get_task
from sptune.tasks.sources import SplitFileLayout, generator_options, generator_params, no_data_dir_error

pytestmark = pytest.mark.usefixtures("offline_data_env")

LAYOUT = SplitFileLayout("demo", ("demo", "demo-release"), {"train": "a.tsv", "test": "b.tsv"},
                         "demo split file not found", "demo/{a,b}.tsv")


def test_generator_options_spell_the_task_defaults():
    assert list(generator_options(min_len=50).items()) == [
        ("generate", True), ("gen_seed", 0), ("gen_n_train", 2000), ("gen_n_val", 300), ("gen_n_test", 300),
        ("gen_min_len", 50),
    ]
    assert list(get_task("retrieval").defaults.items()) == [
        ("max_len", 4000), ("max_train", None), ("generate", True), ("gen_seed", 0), ("gen_n_train", 2000),
        ("gen_n_val", 300), ("gen_n_test", 300), ("gen_min_chars", 100), ("gen_max_chars", 400), ("gen_n_topics", 8),
    ]
    assert get_task("listops").defaults == {
        "max_len": 2000, "max_train": None, "generate": True, "gen_seed": 0, "gen_n_train": 2000, "gen_n_val": 300,
        "gen_n_test": 300, "gen_min_len": 50, "gen_max_len": 300, "gen_max_depth": 6, "gen_max_args": 10,
    }


def test_generator_params_read_the_gen_options_as_ints():
    request = TaskRequest("demo", {"gen_seed": "3", "gen_n_train": 5.0, "gen_other": 1})
    assert generator_params(request, ["n_train"]) == {"seed": 3, "n_train": 5}


def test_layout_prefers_our_folder_then_the_release_folder(tmp_path):
    release = tmp_path / "demo-release"
    release.mkdir()
    (release / "a.tsv").write_text("")
    with pytest.raises(DataError, match=r"demo-release/b\.tsv.*demo split file not found") as err:
        LAYOUT.find(tmp_path)
    assert "generate demo --out DIR" in str(err.value)
    (release / "b.tsv").write_text("")
    assert LAYOUT.find(tmp_path) == {"train": release / "a.tsv", "test": release / "b.tsv"}


def test_layout_without_data_dir_generates_only_when_allowed(tmp_path):
    request = TaskRequest("demo", {"generate": True})
    (tmp_path / "demo").mkdir()
    for name in ("a.tsv", "b.tsv"):
        (tmp_path / "demo" / name).write_text("")
    files, generated = LAYOUT.resolve(request, lambda: tmp_path)
    assert generated and files["train"] == tmp_path / "demo" / "a.tsv"
    with pytest.raises(DataError, match="generate is false"):
        LAYOUT.resolve(TaskRequest("demo", {"generate": False}), lambda: pytest.fail("must not generate"))
    assert "holding demo/{a,b}.tsv, or set generate: true" in str(no_data_dir_error("demo", "demo/{a,b}.tsv"))
