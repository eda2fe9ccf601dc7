"""What a person sees in the terminal: sptune's own lines per stage, and the libraries' tables and INFO logs
only with --verbose.

The same tiny study runs twice through the CLI (a subprocess, progress every second), once as a person runs
it and once with --verbose. Without it: no Ray Tune status header or trial table, no Optuna "A new study
created" line and no Ray start-up banner, while sptune's per-stage lines and selections still print. With
it: all of those, Tune's trial table with the parameter columns sptune configures.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers_tiny import tiny_spec

TINY = [
    "--set", "pretrain.epochs=0", "--set", "finetune.epochs=2", "--set", "variants.scratch.num_samples=2",
    "--set", "variants.spt.num_samples=2", "--set", "scheduler.grace_period=1", "--set", "model.n_layers=1",
    "--set", "rerun_seeds=1",
]  # fmt: skip
STAGE_LINE = re.compile(r"^search-scratch\s+\d+ done\s+\d+ running\s+\d+ stopped early\s+\d+ waiting\s+\d+ failed")
TUNE_TABLES = ("== Status ==", "Trial status", "Number of trials:", "| Trial name")
LIBRARY_INFO = ("A new study created", "Started a local Ray instance", "Total run time")


def run_cli(repo_root: str, out: Path, *extra: str) -> str:
    """The study through the CLI as a person runs it; what it printed (stdout and stderr)."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AIR_NEW_OUTPUT")}
    env.update(PYTHONPATH=repo_root, SPTUNE_PROGRESS_SECONDS="1")
    cmd = [sys.executable, "-m", "sptune.sweep", tiny_spec(repo_root), "--output", str(out), *TINY, *extra]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=out.parent)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc.stdout + proc.stderr


def _sptunes_own_lines(printed: str) -> None:
    lines = printed.splitlines()
    assert "== sptune study: per stage (running) ==" in lines  # a report while it ran
    assert "== sptune study: per stage (finished) ==" in lines
    assert any(STAGE_LINE.match(line) for line in lines)
    assert any(line.startswith("[sptune] search-scratch: best val_acc=") for line in lines)
    assert any(line.startswith("Results: ") for line in lines)


@pytest.mark.slow
def test_the_libraries_tables_and_info_logs_print_only_with_verbose(repo_root, tmp_path):
    quiet = run_cli(repo_root, tmp_path / "quiet")
    verbose = run_cli(repo_root, tmp_path / "verbose", "--verbose")
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
