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
