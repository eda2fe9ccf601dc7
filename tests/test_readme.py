"""The README is the contract with a new user: short, free of history, its set-up in step with CI, its links live
and its commands run.

Every fenced code block of the README (bash, python) carries a tag on the line before it that says how it is tested:
  <!-- test: run -->            each line runs as a shell command (repo root, PYTHONPATH on the repo) and exits 0
  <!-- test: python -->         the block runs as a Python script there and exits 0
  <!-- test: pending WHAT -->   not run yet: it needs WHAT, which is not built; the test is skipped, naming it
  <!-- test: no WHY -->         never run here (the set-up itself, a cloud account): WHY says so
A block without a tag fails, so no command reaches the README untested by accident."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
MAX_LINES = 200
COMMIT = re.compile(r"(?<![0-9A-Za-z])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![0-9A-Za-z])")
HISTORY = re.compile(r"\b(issue|session|round) \d+|#\d+\b|\b20\d\d-\d\d-\d\d\b", re.IGNORECASE)
BLOCK = re.compile(r"(?:<!-- test: (?P<tag>[^\n]*?) -->\n)?```(?P<lang>\w+)\n(?P<body>.*?)```", re.DOTALL)
LINK = re.compile(r"\]\((?!https?://|#)([^)#\s]+)")



def _text() -> str:
    return README.read_text()


def blocks(text: str) -> list[tuple[str, str, str]]:
    """(tag, language, body) of every fenced bash/python block; tag '' where the block has none."""
    return [(m["tag"] or "", m["lang"], m["body"]) for m in BLOCK.finditer(text) if m["lang"] in ("bash", "python")]


def commands(body: str) -> list[str]:
    return [line for line in body.splitlines() if line.strip() and not line.lstrip().startswith("#")]


def test_readme_is_a_short_guide_without_history():
    text = _text()
    assert len(text.splitlines()) <= MAX_LINES, f"README.md has {len(text.splitlines())} lines (at most {MAX_LINES})"
    assert not COMMIT.findall(text), f"README.md names commits: {COMMIT.findall(text)}"
    assert not HISTORY.findall(text), f"README.md names issues, sessions or dates: {HISTORY.findall(text)}"


def test_readme_gives_a_fresh_virtualenv_then_exactly_two_commands_and_ci_runs_the_second():
    tag, lang, body = blocks(_text())[0]
    venv, run_job, run_tests = commands(body)
    assert venv == "python3 -m venv .venv && . .venv/bin/activate"
    assert "python -m sptune.sweep search_spaces/digits_scarce.yaml" in run_job
    assert run_job.startswith("pip install torch==2.13.0") and "pytest" in run_tests
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert run_tests in ci
    assert (REPO / "search_spaces" / "digits_scarce.yaml").is_file()


def _within(given: object, ran: object) -> bool:
    """Every value the spec file gives is the one the run used (the run's copy adds the defaults)."""
    if isinstance(given, dict):
        return isinstance(ran, dict) and all(k in ran and _within(v, ran[k]) for k, v in given.items())
    return given == ran


def test_what_you_get_is_the_main_jobs_committed_decided_result():
    """The README's table is docs/results/digits_scarce/results.json's, from the spec the first command runs, and that
    run decided (the regression guard re-checks the direction on every CI run)."""
    results = json.loads((REPO / "docs/results/digits_scarce/results.json").read_text())
    ran = yaml.safe_load((REPO / "docs/results/digits_scarce/spec.yaml").read_text())  # as run: defaults filled in
    assert _within(yaml.safe_load((REPO / "search_spaces/digits_scarce.yaml").read_text()), ran)
    text = _text()
    for variant in ("scratch", "spt"):
        row = results["summary"][variant]
        line = next(x for x in text.splitlines() if x.startswith(f"| {variant} |"))
        assert f"{row['test_acc_mean']:.4f} ± {row['test_acc_std']:.4f}" in line, line
    test = results["sequential"]["comparisons"]["spt"]
    low, high = test["test"]["interval"]
    assert test["verdict"] == "better" and low > 0
    assert f"{test['test']['mean']:+.4f} [{low:+.4f}, {high:+.4f}]" in text


def test_every_code_block_says_how_it_is_tested():
    found = blocks(_text())
    assert len(found) >= 3  # the parse still finds the blocks
    untagged = [body.splitlines()[0] for tag, _, body in found if not tag]
    assert not untagged, f"README code blocks without a `<!-- test: ... -->` line before them: {untagged}"
    unknown = [tag for tag, _, _ in found if tag.split()[0] not in ("run", "python", "pending", "no")]
    assert not unknown, f"README blocks with an unknown test tag: {unknown}"
    assert any(tag == "run" for tag, _, _ in found)


def test_every_relative_link_names_a_file_of_the_repository():
    targets = set(LINK.findall(_text()))
    assert len(targets) > 5  # the parse still finds the links
    missing = sorted(t for t in targets if not (REPO / t).exists())
    assert not missing, f"README.md links to paths that do not exist: {missing}"


def _runnable() -> list:
    cases = []
    for tag, lang, body in blocks(_text()):
        kind = tag.split()[0] if tag else ""
        if kind == "pending":
            cases.append(pytest.param(lang, body, marks=pytest.mark.skip(reason=f"README block pending: {tag[8:]}")))
        elif kind == "run":
            cases += [pytest.param("bash", line, id=line[:60]) for line in commands(body)]
        elif kind == "python":
            cases.append(pytest.param("python", body, id=body.splitlines()[0][:60]))
    return cases


@pytest.mark.parametrize(("lang", "code"), _runnable())
def test_readme_command_runs(lang: str, code: str, tmp_path: Path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = ["bash", "-c", code.replace("python ", f"{sys.executable} ", 1)] if lang == "bash" else [sys.executable]
    before = set(REPO.iterdir())
    done = subprocess.run(
        cmd, input=code if lang == "python" else None, cwd=REPO, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, (
        f"README {lang} `{code.strip()[:200]}` exited {done.returncode}:\n{done.stderr[-3000:]}"
    )
    assert set(REPO.iterdir()) == before, "a README command left files in the repository root"


@pytest.mark.slow  # makes a virtualenv, pip in it: ~8 s
def test_ci_runs_the_readme_line_in_a_new_virtualenv_outside_the_clone(tmp_path):
    """.ci/run up to the README's line, run with that line replaced by a probe: it runs inside a virtualenv made by
    this run, outside the clone, and gone once the run ends."""
    run_tests = next(line for line in commands(blocks(_text())[0][2]) if "pytest" in line)
    ci = (REPO / ".ci" / "run").read_text()
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
