"""BENCHMARKS.md runs what benchmarks/ holds: every `python benchmarks/X.py` it gives names a script that exists, or
one its retired-scripts table lists (deleted, with the commit it last ran at); every live script has a command there."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
COMMAND = re.compile(r"python benchmarks/([\w/]+\.py)")
RETIRED_ROW = re.compile(r"^\| `(\w+\.py)` \|.*\| ([0-9a-f]{7,40}) \| [^|]+ \|$")
SHARED = {"bench_common.py"}  # imported by the scripts, never run on its own


def _text() -> str:
    return (REPO / "BENCHMARKS.md").read_text()


def retired(text: str) -> dict[str, str]:
    """script → the commit it last ran at, from the table under **Retired scripts**."""
    table = text.split("**Retired scripts**", 1)[1].split("\n\n")[1]
    return {m[1]: m[2] for line in table.splitlines() if (m := RETIRED_ROW.match(line))}


def test_every_command_names_a_live_or_a_retired_script():
    text = _text()
    gone = retired(text)
    assert {"image_step.py", "dropout_cost.py", "attention_floor.py"} <= set(gone)
    commands = set(COMMAND.findall(text))
    assert len(commands) > 10  # the parse still finds the commands
    unknown = {s for s in commands if not (REPO / "benchmarks" / s).is_file() and s not in gone}
    assert not unknown, f"BENCHMARKS.md runs scripts benchmarks/ does not hold: {sorted(unknown)}"


def test_retired_scripts_are_gone_and_live_ones_have_a_command():
    text = _text()
    gone = retired(text)
    assert not [s for s in gone if (REPO / "benchmarks" / s).exists()], "a retired script is still in benchmarks/"
    live = {p.name for p in (REPO / "benchmarks").glob("*.py")} - SHARED
    assert live - set(COMMAND.findall(text)) == set(), "a script in benchmarks/ with no command in BENCHMARKS.md"
