"""The README's first screen is the contract with a new user: keep it and CI in step."""

from __future__ import annotations

from pathlib import Path


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
