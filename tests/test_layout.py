"""The test tree mirrors the packages (docs/architecture.md, "Tests"): every module sptune/<package>/<module>.py has
tests/<package>/test_<module>.py (top level: tests/test_<module>.py), or a row in its package's
tests/<package>/COVERAGE.md naming the existing test files that cover it."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SPTUNE, TESTS = REPO / "sptune", REPO / "tests"
NOTES = "COVERAGE.md"
ROW = re.compile(r"^\| `([\w.]+\.py)` \| (.+?) \|")
TEST_FILE = re.compile(r"`(tests/[\w/]+\.py)(?:::\w+)?`")


def modules() -> list[Path]:
    """Every module of sptune, relative to sptune/ (a package's __init__.py is docstring-only and tests nothing)."""
    return sorted(p.relative_to(SPTUNE) for p in SPTUNE.rglob("*.py") if p.name != "__init__.py")


def mirrored(module: Path) -> Path:
    return TESTS / module.parent / f"test_{module.name}"


def notes() -> dict[Path, list[str]]:
    """module (relative to sptune/) → the test files its package's COVERAGE.md names for it."""
    found: dict[Path, list[str]] = {}
    for note in TESTS.rglob(NOTES):
        package = note.parent.relative_to(TESTS)
        for line in note.read_text().splitlines():
            if m := ROW.match(line):
                found[package / m[1]] = TEST_FILE.findall(m[2])
    return found


def test_every_module_has_its_own_test_file_or_a_note_saying_where_it_is_tested():
    noted = notes()
    missing = [str(m) for m in modules() if not mirrored(m).is_file() and m not in noted]
    assert not missing, f"sptune modules with neither tests/<package>/test_<module>.py nor a row in {NOTES}: {missing}"


def test_every_note_names_a_module_without_its_own_test_file_and_existing_tests():
    noted, existing = notes(), set(modules())
    assert len(noted) > 20  # the rows still parse
    stale = [str(m) for m in noted if m not in existing or mirrored(m).is_file()]
    assert not stale, f"{NOTES} rows for modules that are gone or now have their own test file: {stale}"
    for module, tests in noted.items():
        assert tests, f"{module}: its {NOTES} row names no test file (`tests/...py`)"
        absent = [t for t in tests if not (REPO / t).is_file()]
        assert not absent, f"{module}: {NOTES} names test files that do not exist: {absent}"


# Code reads as today's code: no issue, session, date or path outside the repository in sptune/ (comments, docstrings,
# messages, data files), and no issue or session in the tests and specs a user reads.
HISTORY = r"\bissues?\s+#?\d+|\bsessions?\s+\d+|(?<![\w\"'#:&-])#\d{1,4}(?!\w)"
OUTSIDE = r"\.\./shared|/work/|\b[\w/]+/\w+\.py:\d+|\b20\d\d-\d\d-\d\d\b"
SCANNED = {"sptune": HISTORY + "|" + OUTSIDE, "tests": HISTORY, "search_spaces": HISTORY, "sweeps": HISTORY}
SUFFIXES = {".py", ".yaml", ".yml", ".j2", ".md", ".txt"}


def history_mentions(folder: str, pattern: str) -> list[str]:
    """'file:line: match' of every mention `pattern` finds in the folder's source and data files."""
    found, compiled = [], re.compile(pattern, re.IGNORECASE)
    for path in sorted((REPO / folder).rglob("*")):
        if path.suffix not in SUFFIXES or "__pycache__" in path.parts:
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            found += [f"{path.relative_to(REPO)}:{number}: {m[0]}" for m in compiled.finditer(line)]
    return found


def test_code_names_no_issue_session_date_or_outside_path():
    found = [hit for folder, pattern in SCANNED.items() for hit in history_mentions(folder, pattern)]
    assert not found, (
        "say what the code does now, not the issue, session or date it came from, nor a path outside the "
        f"repository: {found}"
    )


def test_the_history_check_finds_what_it_looks_for():
    n = 40  # the samples are built, so this file does not match its own check
    sample = f"the fix of issue {n}; round #{n}, Session {n}"
    assert re.findall(HISTORY, sample, re.IGNORECASE) == [f"issue {n}", f"#{n}", f"Session {n}"]
    assert re.findall(HISTORY, 'color "#333333", a PALETTE "#0072B2", #  1. a heading') == []
    outside = f"../{'shared'}/data, training/models/attention.py:{n}, {2000 + n}-11-28"
    assert len(re.findall(OUTSIDE, outside)) == 3
