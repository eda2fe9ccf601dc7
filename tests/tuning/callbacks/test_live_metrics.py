"""sptune.tuning.callbacks.live_metrics: what the driver exports to Prometheus per trial. The live view end to end
(a real Prometheus scraping a study, every dashboard query answered): tests/e2e/test_live_view.py."""

from __future__ import annotations

from sptune.tuning.callbacks.live_metrics import tokens_per_second


def test_tokens_per_second_is_the_epochs_own_tokens_over_its_seconds():
    # tokens_seen counts since the trial started: only this epoch's share is its throughput.
    assert tokens_per_second(1000, {"tokens_seen": 1600, "epoch_seconds": 2.0}) == 300.0
    assert tokens_per_second(0, {"tokens_seen": 10, "epoch_seconds": 0.0}) is None
    assert tokens_per_second(0, {"diverged": 1, "epoch": 3}) is None
