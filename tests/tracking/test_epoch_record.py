"""What a checkpoint keeps of its trial's epochs: MLflow's numbers only, and a replay that round-trips."""

from __future__ import annotations

import math

from sptune.tracking.epoch_record import REPLAY_KEY, decode, encode, epoch_row


def test_an_epochs_row_keeps_the_finite_numbers_mlflow_plots_and_nothing_else():
    result = {"epoch": 3, "loss": 0.5, "val_acc": math.nan, "diverged": 0, "done": False, "trial_id": "t", "lr": 1e-3}
    assert epoch_row(result) == {"loss": 0.5, "lr": 1e-3, "epoch": 3}


def test_a_replay_round_trips_and_an_ordinary_result_replays_nothing():
    rows = [epoch_row({"epoch": e, "loss": 1 / e}) for e in (1, 2)]
    assert decode({REPLAY_KEY: encode(rows)}) == rows
    assert decode({"epoch": 4, "loss": 0.1}) == []
