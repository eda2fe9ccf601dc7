"""BENCHMARKS.md is the current table and how to run each benchmark: every `python benchmarks/X.py` it gives names a
script benchmarks/ holds, every script has a command there, and it carries no history (commits, dates, sessions),
which goes to CHANGELOG.md. CHANGELOG.md's retired-scripts table names scripts that are gone, each with the commit
it last ran at."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COMMAND = re.compile(r"python benchmarks/([\w/]+\.py)")
RETIRED_ROW = re.compile(r"^\| `(\w+\.py)` \|.*\| ([0-9a-f]{7,40}) \| [^|]+ \|$")
COMMIT = re.compile(r"(?<![0-9A-Za-z])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![0-9A-Za-z])")
HISTORY = re.compile(r"\b(issue|session|round) \d+|\b20\d\d-\d\d-\d\d\b|before → after", re.IGNORECASE)
SHARED = {"bench_common.py"}  # imported by the scripts, never run on its own


def _text() -> str:
    return (REPO / "BENCHMARKS.md").read_text()


def retired() -> dict[str, str]:
    """script → the commit it last ran at, from the table under CHANGELOG.md's "Retired benchmark scripts"."""
    text = (REPO / "CHANGELOG.md").read_text()
    table = text.split("## Retired benchmark scripts", 1)[1]
    return {m[1]: m[2] for line in table.splitlines() if (m := RETIRED_ROW.match(line))}


def test_every_command_names_a_live_script():
    commands = set(COMMAND.findall(_text()))
    assert len(commands) > 10  # the parse still finds the commands
    unknown = {s for s in commands if not (REPO / "benchmarks" / s).is_file()}
    assert not unknown, f"BENCHMARKS.md runs scripts benchmarks/ does not hold: {sorted(unknown)}"


def test_every_live_script_has_a_command():
    live = {p.name for p in (REPO / "benchmarks").glob("*.py")} - SHARED
    assert live - set(COMMAND.findall(_text())) == set(), "a script in benchmarks/ with no command in BENCHMARKS.md"


def test_retired_scripts_are_gone_and_named_with_their_last_commit():
    gone = retired()
    assert {"image_step.py", "dropout_cost.py", "attention_floor.py"} <= set(gone)
    assert not [s for s in gone if (REPO / "benchmarks" / s).exists()], "a retired script is still in benchmarks/"


def test_benchmarks_md_holds_only_current_numbers():
    text = _text()
    assert "| benchmark | command | headline | target | met? |" in text
    assert not COMMIT.findall(text), (
        f"BENCHMARKS.md names commits (history goes to CHANGELOG.md): {COMMIT.findall(text)}"
    )
    assert not HISTORY.findall(text), f"BENCHMARKS.md carries history (CHANGELOG.md's): {HISTORY.findall(text)}"
