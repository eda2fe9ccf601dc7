"""The README's first screen is the contract with a new user: keep it and CI in step."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest


def _commands(text: str) -> list[str]:
    block = text.split("```bash", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip() and not line.startswith("#")]


def test_readme_gives_exactly_two_setup_commands_and_ci_runs_the_second(repo_root):
    readme = (Path(repo_root) / "README.md").read_text()
    run_job, run_tests = _commands(readme)
    assert "python -m sptune.sweep search_spaces/digits_quick.yaml" in run_job
    assert run_job.startswith("pip install torch==2.13.0") and "pytest" in run_tests
    ci = (Path(repo_root) / ".ci" / "run").read_text().splitlines()
    assert run_tests in ci
    assert (Path(repo_root) / "search_spaces" / "digits_quick.yaml").is_file()


@pytest.mark.slow  # makes a virtualenv, pip in it: ~8 s
def test_ci_runs_the_readme_line_in_a_new_virtualenv_outside_the_clone(repo_root, tmp_path):
    """.ci/run up to the README's line, run with that line replaced by a probe: it runs inside a virtualenv made by
    this run, outside the clone, and gone once the run ends."""
    readme = (Path(repo_root) / "README.md").read_text()
    run_tests = next(line for line in _commands(readme) if "pytest" in line)
    ci = (Path(repo_root) / ".ci" / "run").read_text()
    assert ci.count(run_tests) == 1
    probe = 'python -c "import sys; print(sys.prefix, sys.base_prefix)"'
    clone = tmp_path / "clone"
    (clone / ".ci").mkdir(parents=True)
    (clone / ".ci" / "run").write_text(ci.replace(run_tests, probe))
    done = subprocess.run(["bash", str(clone / ".ci" / "run")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    prefix, base = done.stdout.split()[-2:]
    assert prefix != base, "the README's line ran in the interpreter .ci/run was started with, not a new virtualenv"
    assert not Path(prefix).is_relative_to(clone), f"the virtualenv {prefix} is inside the clone"
    assert not Path(prefix).exists(), f"the virtualenv {prefix} was left behind"
