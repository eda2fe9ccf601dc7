"""The preflight refuses what cannot be a spec file before anything starts: exit 2, one
paragraph naming the file and the fix, nothing written."""

from __future__ import annotations

import os
from pathlib import Path

from sptune.sweep import main


def _refused_in_one_paragraph(args: list[str], capsys, *needles: str) -> str:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "Fix:" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


def test_binary_spec_file_is_refused(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_bytes(bytes([0xFF, 0xFE, 0x00, 0x9C]) + os.urandom(2044))  # 2 kB that are not UTF-8
    out = tmp_path / "out"
    _refused_in_one_paragraph([str(spec), "--output", str(out)], capsys, str(spec), "not a UTF-8 text file")
    assert not out.exists()


def test_directory_given_as_spec_is_refused(tmp_path, capsys):
    out = tmp_path / "out"
    err = _refused_in_one_paragraph([str(tmp_path), "--output", str(out)], capsys, "is a directory")
    assert "not found" not in err
    assert not out.exists()


def test_cli_module_holds_no_checks():
    """The CLI only parses arguments and hands them on: no SptuneError is raised there."""
    source = (Path(__file__).parents[2] / "sptune" / "sweep.py").read_text()
    for check in ("SpecError(", "DataError(", "RuntimeFailure(", "ray.init", "ray.nodes", "socket"):
        assert check not in source, check
