"""sptune.errors: a user's mistake is one paragraph naming where it is and the fix, with its exit code."""

from __future__ import annotations

import pytest

from sptune.errors import DataError, RuntimeFailure, SpecError, cli_exit_code


def _raise(err: Exception):
    def action() -> int:
        raise err

    return action


def test_the_message_names_where_the_problem_and_the_fix():
    err = SpecError("finetune.epochs", "must be at least 1, got 0", "set finetune.epochs: 1 or more")
    assert str(err) == "finetune.epochs: must be at least 1, got 0. Fix: set finetune.epochs: 1 or more"
    assert (err.where, err.problem, err.fix) == ("finetune.epochs", "must be at least 1, got 0",
                                                 "set finetune.epochs: 1 or more")


@pytest.mark.parametrize("err, code", [(SpecError("a", "b", "c"), 2), (DataError("a", "b", "c"), 2),
                                       (RuntimeFailure("a", "b", "c"), 1)])
def test_the_cli_prints_one_line_without_a_traceback_and_exits_with_the_errors_code(err, code, capsys):
    assert cli_exit_code(_raise(err)) == code
    printed = capsys.readouterr()
    assert printed.err == "sptune: error: a: b. Fix: c\n" and printed.out == ""


def test_debug_adds_the_traceback(capsys):
    assert cli_exit_code(_raise(DataError("data/x.csv", "unreadable", "regenerate it")), debug=True) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and err.endswith("sptune: error: data/x.csv: unreadable. Fix: regenerate it\n")


def test_a_bug_is_not_dressed_as_a_user_error(capsys):
    with pytest.raises(KeyError):
        cli_exit_code(_raise(KeyError("bug")))
    assert capsys.readouterr().err == ""
    assert cli_exit_code(lambda: 0) == 0
