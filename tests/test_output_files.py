"""sptune.output_files is the one place that names a study's output files: no other module of sptune/ or
tools/ spells one of those names as a string literal (read with ``ast``, so f-string parts count too)."""

from __future__ import annotations

import ast
from pathlib import Path

from sptune import output_files

ROOT = Path(__file__).resolve().parents[1]
OWNER = ROOT / "sptune" / "output_files.py"
# A name that is also an everyday word elsewhere: "figures" is a key of the report's page data and the
# MLflow artifact folder of the figures, neither a path in the output directory.
ALSO_A_WORD = {output_files.FIGURES}


def _names() -> set[str]:
    return {value for key, value in vars(output_files).items() if key.isupper() and isinstance(value, str)}


def literal_uses(names: set[str], roots: tuple[Path, ...] = (ROOT / "sptune", ROOT / "tools")) -> list[str]:
    """'file:line name' for every string constant equal to one of ``names`` outside output_files.py."""
    found = []
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            if path == OWNER:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
                    found.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.value}")
    return found


def test_every_output_name_is_named_once():
    names = _names()
    assert {"results.json", "study_state.json", "optuna.db", "spec.yaml"} <= names
    assert len(names) == len([k for k, v in vars(output_files).items() if k.isupper() and isinstance(v, str)])


def test_no_module_spells_an_output_file_name():
    assert literal_uses(_names() - ALSO_A_WORD) == []


def test_the_scan_finds_a_spelled_name_in_a_path_or_an_f_string(tmp_path):
    (tmp_path / "writer.py").write_text('out = run_dir / "results.json"\nmsg = f"{run_dir / \'optuna.db\'} kept"\n')
    (tmp_path / "reader.py").write_text("from sptune.output_files import RESULTS_JSON\npath = run_dir / RESULTS_JSON\n")
    writer = f"{tmp_path.name}/writer.py"
    assert literal_uses(_names(), (tmp_path,)) == [f"{writer}:1 results.json", f"{writer}:2 optuna.db"]
