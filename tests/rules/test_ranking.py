"""sptune.rules.ranking: the one rule for "better" (epochs within a trial, trials within a search)."""

from __future__ import annotations

import math

import pytest

from sptune.rules.ranking import creation_index, rank_key


def _best(candidates: list[tuple[dict, int]], metric: str) -> tuple[dict, int]:
    return min(candidates, key=lambda c: rank_key(c[0], metric, c[1]))


def test_finetuning_ranks_accuracy_then_loss_then_the_earlier_epoch_then_the_lower_trial():
    acc = [({"val_acc": 0.8, "val_loss": 0.1, "epoch": 1}, 0), ({"val_acc": 0.9, "val_loss": 0.9, "epoch": 5}, 1)]
    assert _best(acc, "val_acc")[1] == 1  # accuracy first, whatever the loss
    loss = [({"val_acc": 0.9, "val_loss": 0.5, "epoch": 1}, 0), ({"val_acc": 0.9, "val_loss": 0.4, "epoch": 5}, 1)]
    assert _best(loss, "val_acc")[1] == 1
    epoch = [({"val_acc": 0.9, "val_loss": 0.4, "epoch": 5}, 0), ({"val_acc": 0.9, "val_loss": 0.4, "epoch": 2}, 1)]
    assert _best(epoch, "val_acc")[1] == 1  # a later epoch with the same numbers adds nothing
    trial = [({"val_acc": 0.9, "val_loss": 0.4, "epoch": 2}, 3), ({"val_acc": 0.9, "val_loss": 0.4, "epoch": 2}, 1)]
    assert _best(trial, "val_acc")[1] == 1  # not whichever finished first


def test_pretraining_ranks_by_loss_alone_then_the_earlier_epoch():
    runs = [({"val_loss": 0.3, "val_acc": 0.99, "epoch": 1}, 0), ({"val_loss": 0.2, "epoch": 4}, 1)]
    assert _best(runs, "val_loss")[1] == 1  # an accuracy a pretraining reports does not count
    assert rank_key({"val_loss": 0.2, "epoch": 4}, "val_loss", 1) == (0.2, 4.0, 1.0)
    # Tune's own iteration counter stands in when a result carries no epoch.
    assert rank_key({"val_loss": 0.2, "training_iteration": 3}, "val_loss") == (0.2, 3.0, 0.0)


@pytest.mark.parametrize("bad", [None, math.nan, math.inf, "0.9", True])
def test_a_missing_or_non_finite_score_ranks_last(bad):
    real = rank_key({"val_acc": 0.0, "val_loss": 10.0, "epoch": 9}, "val_acc", 9)
    assert rank_key({"val_acc": bad, "val_loss": 0.0, "epoch": 1}, "val_acc") > real
    assert rank_key({"val_loss": bad, "epoch": 1}, "val_loss") > rank_key({"val_loss": 1e9, "epoch": 9}, "val_loss", 9)


def test_a_metric_without_a_rule_is_refused():
    with pytest.raises(ValueError, match="no ranking rule for metric 'accuracy'"):
        rank_key({"accuracy": 1.0}, "accuracy")


@pytest.mark.parametrize("tag, index", [("3_lr=0.001,batch_size=32", 3), ("12", 12), (None, 0), ("lr=0.1", 0)])
def test_the_creation_index_is_read_from_the_experiment_tag(tag, index):
    assert creation_index(tag) == index
