"""The regression guard: a cut-down twin of the README's main job (search_spaces/digits_scarce.yaml), run through
the CLI (docs/results/regression_guard/ has its numbers). SPT must still beat scratch with 5 % of the digits
labels, the whole 95 % interval of Δ above zero, as the main job decides: a change that loses SPT's gain there
fails it. The same study's output is then collected and rendered by tools/results_page.py end to end."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from sptune.sweep import main as sweep

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "search_spaces" / "regression_guard.yaml"


@pytest.fixture(scope="module")
def guard(ray_session, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("guard") / "runs" / "regression_guard"
    assert sweep([str(SPEC), "--output", str(out)]) == 0
    return out


def test_spt_still_beats_scratch_with_scarce_labels_as_the_main_job_decides(guard):
    results = json.loads((guard / "results.json").read_text())
    summary = results["summary"]
    assert results["baseline"] == "scratch" and summary["scratch"]["seeds"] == summary["spt"]["seeds"] == 3
    spt = summary["spt"]
    assert spt["delta_vs"] == "scratch" and spt["delta_paired"] is True and spt["delta_n"] == 3
    low, high = spt["delta_ci95"]
    assert low > 0, (f"SPT no longer detectably better than scratch: Δ {spt['delta_mean']:+.4f} [{low:+.4f}, "
                     f"{high:+.4f}]; scratch {summary['scratch']['test_acc_mean']:.4f}, spt {spt['test_acc_mean']:.4f}")
    assert spt["test_acc_mean"] > 0.7  # 63 labelled digits (chance 0.10)


def test_results_page_from_the_guard_output(guard, tmp_path):
    sys.path.insert(0, str(REPO / "tools"))
    import results_page
    import results_trace

    study = {"id": "regression_guard", "title": "Regression guard", "output": "runs/regression_guard",
             "command": "python -m sptune.sweep search_spaces/regression_guard.yaml --output runs/regression_guard"}
    docs = tmp_path / "docs"
    results_page.collect(guard, "regression_guard", docs)
    text = results_page.render([study], docs)
    results = json.loads((guard / "results.json").read_text())
    spt = results["summary"]["spt"]
    row = next(line for line in text.splitlines() if line.startswith("| spt |"))
    assert f"{spt['test_acc_mean']:.4f} ± {spt['test_acc_std']:.4f}" in row and f"{spt['delta_mean']:+.4f}" in row
    assert "Wall time: " in text and "not recorded" not in text
    assert "## Fairness flags" in (docs / "results/regression_guard/report.md").read_text()
    assert not (docs / "results/regression_guard/report.html").exists()  # stays in the run: the device's 64 MiB
    png = docs / f"results/regression_guard/figures/{results['task']}-lr.png"
    assert png.read_bytes()[:4] == b"\x89PNG" and png.stat().st_size < results_page.MAX_COPY_BYTES
    assert (f"![accuracy vs learning rate, regression_guard](results/regression_guard/figures/{results['task']}-lr.png)"
            in text)
    assert "Ranking" in text  # the report's fairness flags came along
    assert results_trace.untraceable(text, [study], docs) == []  # every number of a real study's page traced
