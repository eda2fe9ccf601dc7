"""Comparing two runs of one study (the command line and `sptune.run`, two machines' copies): what their
results.json say apart from where and when they ran."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

# What differs between two runs of one study: where its files are, Tune's trial ids, when it ran.
PLACES = ("trial_id", "checkpoint", "mlflow_run_id", "checkpoint_path", "trial_seconds")
# The parts of results.json that hold the study's findings.
FINDINGS = ("rows", "summary", "picks", "seeds", "budget", "expected_max", "pretrain")


def numbers(value: Any) -> Any:
    """A results.json value without what only says where and when (paths, trial ids, run ids, times)."""
    if isinstance(value, dict):
        return {k: numbers(v) for k, v in value.items() if k not in PLACES}
    if isinstance(value, list):
        return [numbers(v) for v in value]
    return value


def assert_same_findings(a: dict, b: dict) -> None:
    """Two results.json of one study found the same: rows, picks, Δs, budget, the data they read."""
    assert set(a) == set(b)
    for key in FINDINGS:
        assert numbers(a[key]) == numbers(b[key]), key
    assert a["provenance"]["data"] == b["provenance"]["data"]


def run_api(cwd: Path, env: dict[str, str], spec: str, output: str, timeout: int = 420) -> None:
    """`sptune.run(spec, output=output)` as a user's script runs it, from ``cwd`` in a process of its own."""
    script = f"import sptune; sptune.run({spec!r}, output={output!r})"
    done = subprocess.run([sys.executable, "-c", script], cwd=cwd, env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=timeout)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def results_of(folder: Path) -> dict:
    return json.loads((folder / "results.json").read_text())
