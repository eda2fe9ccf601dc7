"""tools/results_page.py on studies laid out as sptune writes them (spec.yaml, results.json, results.md, report.md,
report.html, figures/): `collect` copies a study's files into docs/results/<id>/, and the page is rendered from
those only: one section per study with its command, wall time from its timeline and its table; a campaign's
SPT-only studies get their Δ paired by seed with the baseline rows of the member that has them.
The end-to-end run on a real study's output is in tests/e2e/test_regression_guard.py; the page's traceability (every
number in a committed file, every commit an ancestor) in tests/tools/test_results_traceable.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sptune.judging import stats
from sptune.judging.results import ResultRow, summarize

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
import results_page  # noqa: E402

SPEC = "variants:\n  spt: {search: {lr: {type: grid, values: [0.001, 0.003]}}}\n"


def _row(variant: str, seed: int, acc: float) -> ResultRow:
    return ResultRow(variant, variant, "listops", seed, 1e-3, 32, 3, acc, acc, 1.0, 3, 0, 0, 24, "t", None, "c")


def _study(path: Path, name: str, accs: dict[str, list[float]], start: float = 100.0) -> None:
    rows = [_row(v, 1000 + i, a) for v, values in accs.items() for i, a in enumerate(values)]
    path.mkdir(parents=True)
    doc = {"study": name, "task": "listops", "baseline": "scratch", "summary": summarize(rows),
           "timeline": [{"stage": "search-spt", "start": start, "end": start + 90.0}],
           "rows": [r.__dict__ for r in rows]}
    (path / "results.json").write_text(json.dumps(doc))
    (path / "results.md").write_text(f"# {name}\n")
    (path / "spec.yaml").write_text(SPEC)
    (path / "figures").mkdir()
    (path / "figures" / "listops-lr.png").write_bytes(b"\x89PNG small")
    (path / "figures" / "listops-lr.svg").write_text("<svg/>")  # the page links the PNG only
    (path / "report.html").write_text("<html>report</html>")
    (path / "report.md").write_text("# r\n\n## Fairness flags\n\n- **WARN: Ranking flips** — text\n  - spt vs scratch\n"
                                    "\n## Other\n\n- not a flag\n")


@pytest.fixture
def campaign(tmp_path) -> Path:
    root = tmp_path / "runs" / "budget"
    _study(root / "lo-epochs0", "lo", {"scratch": [0.30, 0.32, 0.31], "spt": [0.30, 0.33, 0.31]})
    _study(root / "lo-epochs5", "lo", {"spt": [0.40, 0.41, 0.45]}, start=300.0)
    (root / "results.json").write_text(json.dumps({"campaign": "budget", "rows": [],
                                                   "studies": {"lo-epochs0": {}, "lo-epochs5": {}}}))
    return tmp_path


def test_campaign_page_pairs_spt_only_studies_with_the_baseline_member(campaign):
    studies = [{"id": "budget", "title": "Budget", "command": "python -m sptune.sweep sweeps/b.yaml",
                "output": "runs/budget"},
               {"id": "later", "title": "Later", "command": "python -m sptune.sweep x.yaml", "output": "runs/none"}]
    docs = campaign / "docs"
    results_page.collect(campaign / "runs" / "budget", "budget", docs)
    text = results_page.render(studies, docs)
    assert "```bash\npython -m sptune.sweep sweeps/b.yaml\n```" in text
    assert "Wall time: 1.5 min (90 s)" in text and "Wall time, all 2 studies: 3.0 min (180 s)" in text
    delta = stats.paired_delta({"1000": 0.40, "1001": 0.41, "1002": 0.45}, {"1000": 0.30, "1001": 0.32, "1002": 0.31})
    line = next(x for x in text.splitlines() if x.startswith("| lo-epochs5 | spt |"))
    assert f"{delta.mean:+.4f} [{delta.interval[0]:+.4f}, {delta.interval[1]:+.4f}]" in line
    assert "0.4200 ± 0.0265" in line
    # The report's flags by headline; their details (with the report's own numbers) stay in the report.
    assert "- **WARN: Ranking flips**\n" in text and "— text" not in text and "not a flag" not in text
    assert (docs / "results/budget/lo-epochs5/figures/listops-lr.png").read_bytes() == b"\x89PNG small"
    assert not (docs / "results/budget/lo-epochs5/figures/listops-lr.svg").exists()
    for name in ("spec.yaml", "results.json", "results.md", "report.md"):
        assert (docs / "results/budget/lo-epochs0" / name).is_file(), name
    assert not (docs / "results/budget/lo-epochs0/report.html").exists()  # stays in the run (tools/device's 64 MiB)
    assert (docs / "results/budget/results.json").is_file()
    assert "Report: [report.md](results/budget/lo-epochs5/report.md)." in text
    assert "([the report](results/budget/lo-epochs5/report.md) has their details)" in text
    assert "![accuracy vs learning rate, lo](results/budget/lo-epochs5/figures/listops-lr.png)" in text
    assert results_page.PLACEHOLDER in text and "*Pending: no results collected in `docs/results/later/` yet.*" in text


def test_members_with_their_own_baseline_pair_with_it_and_their_rankings_are_compared(tmp_path):
    """A data-scale or fixed-vs-swept campaign: each study has its own scratch, so each Δ pairs with it."""
    root = tmp_path / "runs" / "scale"
    _study(root / "small", "s", {"scratch": [0.20, 0.25, 0.22], "spt": [0.50, 0.55, 0.52]})
    _study(root / "large", "s", {"scratch": [0.90, 0.91, 0.92], "spt": [0.80, 0.81, 0.85]}, start=300.0)
    (root / "results.json").write_text(json.dumps({"campaign": "scale", "rows": [],
                                                   "studies": {"small": {}, "large": {}}}))
    docs = tmp_path / "docs"
    results_page.collect(root, "scale", docs)
    text = results_page.render([{"id": "scale", "title": "S", "command": "c", "output": "runs/scale"}], docs)
    own = stats.paired_delta({"1000": 0.80, "1001": 0.81, "1002": 0.85}, {"1000": 0.90, "1001": 0.91, "1002": 0.92})
    line = next(x for x in text.splitlines() if x.startswith("| large | spt |"))
    assert f"{own.mean:+.4f} [{own.interval[0]:+.4f}, {own.interval[1]:+.4f}]" in line  # not small's scratch
    assert "- small: spt > scratch\n- large: scratch > spt" in text
    assert "Ranking of the variants they share: **differs between the studies**." in text


def test_the_lr_verdict_counts_the_range_the_extension_widened(tmp_path):
    """As the report's edge flag: a pick at the spec's grid end is inside once the extension searched beyond it."""
    run = tmp_path / "runs" / "one"
    _study(run, "one", {"scratch": [0.30, 0.32, 0.31], "spt": [0.40, 0.41, 0.45]})
    doc = json.loads((run / "results.json").read_text())
    doc["lr_extension"] = {"spt": {"rounds": 1, "added_lrs": [[0.0003]], "searched_range": [0.0003, 0.003]}}
    (run / "results.json").write_text(json.dumps(doc))
    docs = tmp_path / "docs"
    results_page.collect(run, "one", docs)
    text = results_page.render([{"id": "one", "title": "One", "command": "c", "output": "runs/one"}], docs)
    line = next(x for x in text.splitlines() if x.startswith("| spt | grid"))
    assert "extended to grid [3e-4, 1e-3, 3e-3]" in line and "| 1e-3 | yes |" in line


def test_the_page_reads_only_the_collected_files(campaign):
    studies = [{"id": "budget", "title": "Budget", "command": "c", "output": "runs/budget"}]
    docs = campaign / "docs"
    results_page.collect(campaign / "runs" / "budget", "budget", docs)
    before = results_page.render(studies, docs)
    (campaign / "runs" / "budget" / "lo-epochs5" / "results.json").write_text("{}")  # the run dir changes
    assert results_page.render(studies, docs) == before
    # A collected study the manifest does not list is an error, not a silent omission.
    results_page.collect(campaign / "runs" / "budget" / "lo-epochs0", "extra", docs)
    with pytest.raises(SystemExit, match="extra"):
        results_page.render(studies, docs)


def test_collect_needs_a_finished_study_and_keeps_large_files_out(campaign, monkeypatch, capsys):
    docs = campaign / "docs"
    with pytest.raises(SystemExit, match="results.json"):
        results_page.collect(campaign / "runs" / "nothing", "x", docs)
    run = campaign / "runs" / "budget" / "lo-epochs0"
    monkeypatch.setattr(results_page, "MAX_COPY_BYTES", 12)
    results_page.collect(run, "small", docs)
    assert not (docs / "results/small/report.md").exists()  # over the limit
    assert (docs / "results/small/results.json").is_file()  # required files are always copied
    assert "left out" in capsys.readouterr().out
    (run / "spec.yaml").unlink()
    with pytest.raises(SystemExit, match="spec.yaml"):
        results_page.collect(run, "small", docs)


def test_cli_collects_writes_the_page_and_prints_the_commands(campaign, tmp_path):
    manifest = tmp_path / "m.yaml"
    manifest.write_text("studies:\n  - {id: b, title: B, command: 'python -m sptune.sweep s.yaml', output: runs/budget,"
                        " papers: 'The papers: 0.40 -> 0.58.'}\n")
    docs = tmp_path / "docs"
    base = [sys.executable, str(REPO / "tools/results_page.py"), "--manifest", str(manifest), "--docs", str(docs)]
    listed = subprocess.run([*base, "--print-commands"], capture_output=True, text=True, check=True).stdout
    assert listed.strip() == "python -m sptune.sweep s.yaml"
    subprocess.run([*base, "collect", str(campaign / "runs" / "budget"), "--id", "b"], check=True, capture_output=True)
    subprocess.run(base, check=True, capture_output=True)
    text = (docs / "results.md").read_text()
    assert "The papers: 0.40 -> 0.58." in text and "#### lo-epochs5" in text


def test_every_study_of_the_shipped_manifest_names_a_shipped_spec():
    studies = results_page.load_manifest(REPO / "docs/results_studies.yaml")
    for study in studies:
        spec = study["command"].split()[3]
        assert (REPO / spec).is_file(), spec
        assert f"--output {study['output']}" in study["command"]
    assert {"digits_quick", "data_scale", "cifar16_converged", "frozen_vs_unfrozen"} <= {s["id"] for s in studies}
