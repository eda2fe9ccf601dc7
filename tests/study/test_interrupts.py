"""SIGINT and SIGTERM end a study with their own exit code and one paragraph (where, what is saved, the exact
--resume command); inside the Tuner they go through Tune's graceful stop and are still reported as interrupts.
A whole study interrupted and resumed: tests/e2e/test_resume_everywhere.py."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from sptune.errors import StudyInterrupted
from sptune.study.interrupts import STOPS, InterruptWatch, check, paragraph, stop_signals, watched_tuner
from sptune.study.state import StateFile


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_stop_signal_outside_the_tuner_ends_the_study_at_its_next_safe_point(signum, code, tmp_path):
    before = signal.getsignal(signum)
    with pytest.raises(StudyInterrupted) as stopped, stop_signals(tmp_path):
        os.kill(os.getpid(), signum)  # recorded only: it may come in the middle of a database write
        assert STOPS.received == signum
        check()
    assert stopped.value.exit_code == code
    assert signal.getsignal(signum) is before  # the caller's handlers back


def test_a_second_signal_stops_at_once(tmp_path):
    with pytest.raises(StudyInterrupted) as stopped, stop_signals(tmp_path):
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
    assert stopped.value.exit_code == 130


def test_inside_the_tuner_both_signals_go_to_tunes_graceful_stop_and_are_reported_after_it(tmp_path):
    tune_stops: list[int] = []

    def tune_handler(signum: int, frame: object) -> None:  # what Tune installs: it only asks its loop to end
        tune_stops.append(signum)

    with stop_signals(tmp_path):
        with pytest.raises(StudyInterrupted) as stopped, watched_tuner():
            signal.signal(signal.SIGINT, tune_handler)  # tune.run, before it sets the callbacks up
            InterruptWatch().setup()
            os.kill(os.getpid(), signal.SIGTERM)  # a timeout: Tune's stop too, not a kill mid-snapshot
        assert tune_stops == [signal.SIGTERM] and stopped.value.exit_code == 143
        assert signal.getsignal(signal.SIGINT) is not tune_handler  # ours again after fit()


def test_the_paragraph_says_where_what_is_saved_and_the_exact_resume_command(tmp_path):
    out = tmp_path / "study"
    out.mkdir()
    StateFile(out).save()
    with stop_signals(Path("runs/x")):
        STOPS.study_dir, STOPS.stages = out, ("pretrain", "search-scratch")
        text = paragraph(StudyInterrupted(signal.SIGINT), ["spec.yaml", "--set", "finetune.epochs=6"])
    assert text.startswith("sptune: interrupted by SIGINT while its Tuner trained")
    assert "not yet selected: pretrain, search-scratch" in text and f"Saved in {out}" in text
    assert text.count("\n") == 0 and "selected nothing" not in text
    assert "python -m sptune.sweep spec.yaml --set finetune.epochs=6 --output runs/x --resume" in text
    assert text.endswith("(exit status 130)")
