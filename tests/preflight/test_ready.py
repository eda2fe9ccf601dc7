"""The preflight refuses what cannot be a spec file before anything starts: exit 2, one
paragraph naming the file and the fix, nothing written."""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

from sptune.output_files import STATE
from sptune.preflight.options import RunOptions
from sptune.preflight.ready import prepare, prepare_inputs
from sptune.spec.reading import resolved_spec_text
from sptune.study.state import StudyState
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


def test_a_packed_study_that_cannot_run_whole_packs_is_refused_before_anything_starts(repo_root, tmp_path, capsys):
    out = tmp_path / "out"
    spec = str(Path(repo_root) / "search_spaces" / "digits_quick.yaml")
    _refused_in_one_paragraph([spec, "--set", "resources.pack=4", "--set", "resources.max_concurrent=3", "--output",
                               str(out)], capsys, "resources.max_concurrent", "a pack of 4 trials", "at least 4")
    _refused_in_one_paragraph([spec, "--set", "resources.pack=4", "--set", "scheduler.type=hyperband", "--output",
                               str(out)], capsys, "resources.pack", "hyperband")
    assert not out.exists()


def test_cli_module_holds_no_checks():
    """The CLI only parses arguments and hands them on: no SptuneError is raised there."""
    source = (Path(__file__).parents[2] / "sptune" / "sweep.py").read_text()
    for check in ("SpecError(", "DataError(", "RuntimeFailure(", "ray.init", "ray.nodes", "socket"):
        assert check not in source, check


def _campaign(tmp_path: Path) -> Path:
    spec = Path(__file__).parents[2] / "search_spaces" / "digits_quick.yaml"
    path = tmp_path / "campaign.yaml"
    path.write_text(f"campaign: scale\nstudies:\n  - spec: {spec}\n    name: d\n"
                    "    axes: {task.train_fraction: [0.5, 1.0]}\n")
    return path


def test_a_resumed_campaign_starts_the_studies_it_had_not_reached(tmp_path, capsys):
    """Killed in its first study, a campaign resumes that one and starts the next one new (before, every
    study it had not reached refused the resume: "no interrupted study to resume here")."""
    campaign, out = _campaign(tmp_path), tmp_path / "out"
    options = RunOptions(spec_path=campaign, output=out, resume=True)
    first = prepare_inputs(options).studies[0]
    (out / first.member.name).mkdir(parents=True)
    (out / first.member.name / "spec.yaml").write_text(resolved_spec_text(first.inputs.spec))
    (out / first.member.name / STATE).write_text(json.dumps(asdict(StudyState())))

    ready = prepare(options)
    assert [s.resume_state is not None for s in ready.studies] == [True, False]
    assert not (out / ready.studies[1].run_name).exists()  # nothing of the new study is made by the preflight


def test_resuming_a_campaign_none_of_whose_studies_started_is_refused(tmp_path, capsys):
    out = tmp_path / "out"
    _refused_in_one_paragraph([str(_campaign(tmp_path)), "--output", str(out), "--resume"], capsys,
                              f"--output {out}", "no interrupted campaign to resume")
