"""sptune.report.formatting: how the page and its tables write learning rates, accuracies and intervals."""

from __future__ import annotations

import math

import pytest

from sptune.judging.stats import summarize
from sptune.report.formatting import fmt_lr, fmt_pct, interval_pct, mean_std, pct, signed_pts, spread_sentence
from sptune.rules.seeds import FINETUNE_SPREAD, SPREAD_TEXT


@pytest.mark.parametrize("lr, text", [(3e-4, "3e-4"), (1.5e-3, "1.5e-3"), (0.1, "1e-1"), (2.25e-5, "2.25e-5"),
                                      (None, "-")])
def test_learning_rates_are_written_without_trailing_zeros(lr, text):
    assert fmt_lr(lr) == text


def test_accuracies_in_percent_and_differences_in_signed_points():
    assert pct(0.9123) == "91.23" and signed_pts(0.0123) == "+1.23" and signed_pts(-0.0123) == "-1.23"
    assert fmt_pct(0.5) == "50.00" and fmt_pct("0.5") == "50.00"
    assert fmt_pct(None) == fmt_pct(math.nan) == fmt_pct("n/a") == "-"  # a missing number never prints as nan


def test_mean_std_and_interval_over_seeds():
    three = summarize([0.90, 0.92, 0.94])
    assert mean_std(three) == "92.00 ± 2.00"
    low, high = three.interval
    assert interval_pct(three) == f"[{pct(low)}, {pct(high)}] (95 % t-interval, n = 3)"
    one = summarize([0.9])
    assert mean_std(one) == "90.00"  # no std with one seed
    assert interval_pct(one) == "(n = 1: no interval)"
    assert mean_std(three, signed=True) == "+92.00 ± 2.00"


def test_the_spread_sentence_of_studies_that_predate_it_is_empty():
    assert spread_sentence(None) == spread_sentence("") == ""
    assert spread_sentence(FINETUNE_SPREAD) == SPREAD_TEXT[FINETUNE_SPREAD]
    assert "finetuning seeds only" in spread_sentence(FINETUNE_SPREAD)
