"""Cache locations, keys and the generated-dataset cache (`sptune.tasks.cache`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sptune.tasks.cache import cache_root, digest, ensure_generated

pytestmark = pytest.mark.usefixtures("offline_data_env")


def test_cache_root_follows_the_environment(tmp_path, monkeypatch):
    assert cache_root() == tmp_path / "cache"
    monkeypatch.delenv("SPTUNE_CACHE_DIR")
    assert cache_root() == Path.home() / ".cache" / "sptune"


def test_digest_is_stable_so_existing_caches_stay_valid():
    # Values written by the code before the helpers moved: a change here orphans every user's cache.
    assert digest({"v": 1, "seed": 0, "n": 30, "resolution": 32, "contour_length": 14}) == "137071292afbee03"
    assert digest({"b": 1, "a": [1, 2]}) == digest({"a": [1, 2], "b": 1})  # key order does not matter


def test_ensure_generated_writes_once_and_publishes_a_complete_directory(tmp_path):
    calls = []

    def write(directory: Path) -> None:
        calls.append(directory)
        (directory / "data.txt").write_text("rows")

    first = ensure_generated("demo", {"seed": 1}, write)
    assert first == tmp_path / "cache" / "generated" / f"demo-{digest({'seed': 1})}"
    assert (first / "DONE").is_file() and (first / "data.txt").read_text() == "rows"
    assert json.loads((first / "params.json").read_text()) == {"seed": 1}
    assert ensure_generated("demo", {"seed": 1}, write) == first and len(calls) == 1
    assert [p.name for p in first.parent.iterdir()] == [first.name]  # no temporary sibling left


def test_a_failed_write_leaves_nothing_behind(tmp_path):
    def write(directory: Path) -> None:
        raise RuntimeError("generator failed")

    with pytest.raises(RuntimeError):
        ensure_generated("demo", {"seed": 2}, write)
    assert list((tmp_path / "cache" / "generated").iterdir()) == []
