"""The report's flag for an SPT checkpoint that learned less than a predictor that needs no training."""

from __future__ import annotations

from pathlib import Path

from sptune.judging.trivial_check import versus_trivial
from sptune.report.flags import flag_spt_trivial
from sptune.report.records import ReportData


def _data(**checks) -> ReportData:
    return ReportData(name="s", run_dir=Path("."), rows=[], trials=[], spec={}, timeline=[], read_from="results.json",
                      versus_trivial=checks)


def _check(val_loss: float) -> dict:
    return versus_trivial({"val_loss": val_loss, "trivial_neighbour_mean_loss": 0.07,
                           "trivial_visible_mean_loss": 0.16, "trivial_best": 0.07})


def test_a_checkpoint_worse_than_the_neighbour_average_raises_a_warning_naming_it():
    flag = flag_spt_trivial(_data(pretrain=_check(0.11)))
    assert flag.level == "warn" and flag.title == "SPT learned less than a neighbour average"
    assert flag.items and flag.items[0].startswith("pretrain: selected checkpoint val_loss 0.1100")


def test_checkpoints_that_beat_every_trivial_predictor_pass_and_none_recorded_is_said():
    assert flag_spt_trivial(_data(pretrain=_check(0.06))).level == "ok"
    assert flag_spt_trivial(_data()).level == "info"
