"""What a person sees in the terminal: sptune's own lines per stage, and the libraries' tables and INFO logs
only with --verbose.

The same tiny study runs twice through the CLI (two subprocesses side by side, progress every second), once as
a person runs it and once with --verbose. Without it: no Ray Tune status header or trial table, no Optuna "A new
study created" line and no Ray start-up banner, while sptune's per-stage lines and selections still print. With
it: all of those, Tune's trial table with the parameter columns sptune configures.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers_tiny import PLAIN, tiny_spec

# Each variant's search and its pick only (PLAIN): the stages after a search print lines of the same kinds.
TINY = [
    "--set", "pretrain.epochs=0", "--set", "finetune.epochs=2", "--set", "variants.scratch.num_samples=2",
    "--set", "variants.spt.num_samples=2", "--set", "scheduler.grace_period=1", "--set", "model.n_layers=1",
    "--set", "rerun_seeds=1", *PLAIN,
]  # fmt: skip
STAGE_LINE = re.compile(r"^search-scratch\s+\d+ done\s+\d+ running\s+\d+ stopped early\s+\d+ waiting\s+\d+ failed")
TUNE_TABLES = ("== Status ==", "Trial status", "Number of trials:", "| Trial name")
LIBRARY_INFO = ("A new study created", "Started a local Ray instance", "Total run time")


def start_cli(repo_root: str, out: Path, *extra: str) -> subprocess.Popen:
    """The study through the CLI as a person runs it, in a subprocess of its own session (killed with the Ray it
    starts if the test ends first), printing to files beside `out`."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AIR_NEW_OUTPUT")}
    env.update(PYTHONPATH=repo_root, SPTUNE_PROGRESS_SECONDS="1")
    cmd = [sys.executable, "-m", "sptune.sweep", tiny_spec(repo_root), "--output", str(out), *TINY, *extra]
    with open(f"{out}.out", "w") as stdout, open(f"{out}.err", "w") as stderr:
        return subprocess.Popen(cmd, env=env, stdout=stdout, stderr=stderr, cwd=out.parent, start_new_session=True)


def output_of(proc: subprocess.Popen, out: Path) -> str:
    """What the study `start_cli` started printed (stdout, then stderr), once it has ended well."""
    proc.wait(timeout=600)
    stdout, stderr = Path(f"{out}.out").read_text(), Path(f"{out}.err").read_text()
    assert proc.returncode == 0, stdout[-2000:] + stderr[-3000:]
    return stdout + stderr


def _sptunes_own_lines(printed: str) -> None:
    lines = printed.splitlines()
    assert "== sptune study: per stage (running) ==" in lines  # a report while it ran
    assert "== sptune study: per stage (finished) ==" in lines
    assert any(STAGE_LINE.match(line) for line in lines)
    assert any(line.startswith("[sptune] search-scratch: best val_acc=") for line in lines)
    assert any(line.startswith("Results: ") for line in lines)


@pytest.mark.slow
def test_the_libraries_tables_and_info_logs_print_only_with_verbose(repo_root, tmp_path):
    # Side by side: each start-up (Python, Ray) overlaps the other's study.
    procs = {
        "quiet": start_cli(repo_root, tmp_path / "quiet"),
        "verbose": start_cli(repo_root, tmp_path / "verbose", "--verbose"),
    }
    try:
        quiet, verbose = (output_of(proc, tmp_path / name) for name, proc in procs.items())
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    print(f"\nlines printed: {len(quiet.splitlines())} without --verbose, {len(verbose.splitlines())} with it")
    _sptunes_own_lines(quiet)
    _sptunes_own_lines(verbose)
    for text in TUNE_TABLES[:1] + TUNE_TABLES[2:] + LIBRARY_INFO:
        assert text not in quiet, text
        assert text in verbose, text
    assert "Trial status" not in quiet  # nor the tables of Tune's newer output engine
    # Tune's own trial table, with the parameter columns sptune configures.
    header = next(line for line in verbose.splitlines() if "Trial name" in line)
    assert [c.strip() for c in header.strip("|").split("|")][3:6] == ["variant", "lr", "batch"], header
