"""The data-preparation progress bar: on stderr when forced (or long and watched), never in logs otherwise."""

from __future__ import annotations

import re

import pytest

from sptune.tasks.listops import generate_listops, read_tsv
from sptune.tasks.pathfinder import read_images, read_metadata
from sptune.tasks.pathfinder_generator import generate_pathfinder
from sptune.tasks.progress_bar import BAR_ENV

pytestmark = pytest.mark.usefixtures("offline_data_env")


def _final_counts(stderr: str, desc: str) -> str:
    """The last redraw of the bar named ``desc``: tqdm rewrites one line with carriage returns."""
    draws = [part for part in re.split(r"[\r\n]", stderr) if part.startswith(desc)]
    assert draws, f"no {desc!r} bar in {stderr!r}"
    return draws[-1]


def test_forced_bars_follow_pathfinder_generation_and_reading(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv(BAR_ENV, "1")
    made = generate_pathfinder(tmp_path, seed=1, n=6, resolution=32, contour_length=6)
    assert "6/6" in _final_counts(capfd.readouterr().err, "generating pathfinder32")
    part, skipped = read_images(made.directory, read_metadata(made.directory), 32)
    assert (len(part), skipped) == (6, 0)
    assert "6/6" in _final_counts(capfd.readouterr().err, f"reading {made.directory.name} images")


def test_forced_bars_follow_listops_generation_and_reading(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv(BAR_ENV, "1")
    folder = generate_listops(tmp_path, 3, 20, 5, 5, 10, 80, 4, 5)
    assert "30/30" in _final_counts(capfd.readouterr().err, "generating listops")
    tokens, _ = read_tsv(folder / "basic_train.tsv")
    assert len(tokens) == 20 and "20/20" in _final_counts(capfd.readouterr().err, "reading basic_train.tsv")


@pytest.mark.parametrize("setting", ["", "0"])
def test_no_bar_in_logs_unless_forced(tmp_path, monkeypatch, capfd, setting):
    # Under pytest stderr is no terminal (as in CI and `ray job` logs): small or not, no bar.
    monkeypatch.setenv(BAR_ENV, setting)
    generate_pathfinder(tmp_path, seed=1, n=4, resolution=32, contour_length=6)
    generate_listops(tmp_path, 3, 20, 5, 5, 10, 80, 4, 5)
    assert capfd.readouterr().err == ""
