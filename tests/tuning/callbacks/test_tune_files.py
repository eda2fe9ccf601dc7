"""sptune.tuning.callbacks.tune_files: Tune's JSON logger only by default; Tune's three defaults on request; the
switch Tune reads is set only while a study's fit() runs."""

from __future__ import annotations

import os

from ray.tune.logger import JsonLoggerCallback

from sptune.tuning.callbacks.tune_files import LOGGERS_ENV, TUNE_AUTO_LOGGERS_ENV, chosen_tune_loggers, result_loggers


def test_by_default_only_the_json_logger_and_tunes_own_loggers_off_inside_fit_only(monkeypatch):
    monkeypatch.delenv(LOGGERS_ENV, raising=False)
    monkeypatch.delenv(TUNE_AUTO_LOGGERS_ENV, raising=False)
    assert [type(c) for c in result_loggers()] == [JsonLoggerCallback]
    with chosen_tune_loggers():
        assert os.environ[TUNE_AUTO_LOGGERS_ENV] == "1"
    assert TUNE_AUTO_LOGGERS_ENV not in os.environ  # a later plain Tuner gets Tune's defaults


def test_all_gives_tune_its_defaults_back_and_the_users_own_setting_survives(monkeypatch):
    monkeypatch.setenv(LOGGERS_ENV, "all")
    monkeypatch.setenv(TUNE_AUTO_LOGGERS_ENV, "1")  # the user's own choice for their other Tuners
    assert result_loggers() == []
    with chosen_tune_loggers():
        assert TUNE_AUTO_LOGGERS_ENV not in os.environ
    assert os.environ[TUNE_AUTO_LOGGERS_ENV] == "1"
