"""results.json's `versus_trivial`: a selected SPT checkpoint against the trivial predictors, and its words."""

from __future__ import annotations

import pytest

from sptune.judging.trivial_check import trivial_checks, trivial_lines, versus_trivial


def test_a_loss_objective_beats_the_trivial_predictors_only_below_the_best_of_them():
    metrics = {"val_loss": 0.060, "val_masked_acc": 0.1, "trivial_neighbour_mean_loss": 0.070,
               "trivial_visible_mean_loss": 0.150, "trivial_best": 0.070}
    check = versus_trivial(metrics)
    assert check["unit"] == "val_loss" and check["beats_trivial"] is True
    assert check["relative_margin"] == pytest.approx(1 / 7)
    assert versus_trivial({**metrics, "val_loss": 0.071})["beats_trivial"] is False


def test_a_cross_entropy_objective_is_judged_by_masked_accuracy():
    metrics = {"val_loss": 2.0, "val_masked_acc": 0.30, "trivial_nearest_visible_acc": 0.35, "trivial_best": 0.35}
    check = versus_trivial(metrics)
    assert check["unit"] == "val_masked_acc" and check["beats_trivial"] is False
    assert versus_trivial({"val_loss": 1.0}) is None  # a pretraining from before the trivial scores


def test_results_md_names_each_pretraining_and_says_when_it_learned_less():
    study = {"study": "s", "pretrain": {"versus_trivial": versus_trivial(
        {"val_loss": 0.11, "trivial_neighbour_mean_loss": 0.07, "trivial_visible_mean_loss": 0.16,
         "trivial_best": 0.07})}, "task": "image"}
    assert list(trivial_checks(study)) == ["pretrain"]
    text = "\n".join(trivial_lines(study))
    assert "pretrain: selected checkpoint val_loss 0.1100" in text and "neighbour_mean_loss 0.0700" in text
    assert "does NOT beat" in text and "untrained prior" in text
    assert trivial_lines({"study": "s"}) == []
