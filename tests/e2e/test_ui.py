"""What a person sees: the progress lines while a study runs, and the MLflow UI afterwards.

One tiny digits study through the CLI (a subprocess, as a user runs it) against a real
`mlflow server` (conftest's `shown_study`, shared with test_optuna_storage); its printed progress
is checked, then the printed URL is opened in headless Chromium (Playwright driving the system's
/usr/bin/chromium) and the runs table is read back:
the study's experiment, the trials nested under the study's run, sptune's columns with the
values MLflow holds. The filters documented in dashboards/README.md are run against the same store.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sptune.tracking.mlflow_tracker import VIEW_COLUMNS
from tests.helpers_browser import CHROMIUM, FLAGS, screenshot_path
from tests.helpers_tiny import SHOWN_EPOCHS, SHOWN_RERUN_SEEDS, SHOWN_TRIALS

RERUNS = 2 * SHOWN_RERUN_SEEDS  # scratch and spt, each re-trained per seed and tested once
SHOT = screenshot_path("mlflow-ui.png")


@pytest.fixture(scope="module")
def study(shown_study):
    return shown_study.stdout, shown_study.results, shown_study.client, shown_study.runs


def _children(runs: list, phase: str, variant: str | None = None) -> list:
    return [r for r in runs if r.data.tags.get("sptune.phase") == phase
            and variant in (None, r.data.params.get("variant"))]  # fmt: skip


# ----------------------------------------------------------------------------- progress


LINE = re.compile(
    r"^(\S+)\s+(\d+) done\s+(\d+) running\s+(\d+) stopped early\s+(\d+) waiting\s+(\d+) failed\s+of (\d+)\s+"
    r"best (\S+) (\S+)$"
)


def _variant_lines(stdout: str, state: str) -> list[dict[str, tuple]]:
    """Each report's per-stage lines of the study's one Tuner, in one state ("running"/"finished")."""
    reports, lines = [], stdout.splitlines()
    for i, line in enumerate(lines):
        if line == f"== sptune study: per stage ({state}) ==":
            block = {}
            for following in lines[i + 1 :]:
                m = LINE.match(following)
                if not m:
                    break
                block[m.group(1)] = m.groups()[1:]
            reports.append(block)
    return reports


def test_progress_shows_each_variants_trials_and_best_so_far(study):
    stdout, _, client, runs = study
    [final] = _variant_lines(stdout, "finished")
    assert set(final) == {"pretrain", "search-scratch", "search-spt", "rerun-scratch", "rerun-spt"}
    for variant in ("scratch", "spt"):
        done, running, stopped, waiting, failed, planned, metric, best = final[f"search-{variant}"]
        trials = _children(runs, "search", variant)
        assert int(planned) == len(trials) == SHOWN_TRIALS[variant]
        assert (running, waiting, failed) == ("0", "0", "0")
        # done = trained all epochs; stopped = ended earlier (synchronous halving, grace 1, η 2)
        epochs = [len(client.get_metric_history(r.info.run_id, "val_acc")) for r in trials]
        full = epochs.count(SHOWN_EPOCHS)
        assert (int(done), int(stopped)) == (full, len(trials) - full), epochs
        assert int(stopped) >= 1
        assert metric == "val_acc"
        assert float(best) == pytest.approx(max(r.data.metrics["best_val_acc"] for r in trials), abs=1e-4)
    assert final["pretrain"][6] == "val_loss"  # each stage ranked by its own metric
    assert _variant_lines(stdout, "running"), "no report while the study ran (every 1 s here)"
    # Tune's own trial table prints only with --verbose: tests/test_terminal_output.py checks its columns.
    assert not any("Trial name" in line for line in stdout.splitlines())


# ----------------------------------------------------------------------------- MLflow UI




def _printed_url(stdout: str) -> str:
    [url] = re.findall(r"^MLflow UI: open (http://\S+)$", stdout, re.M)
    return url


def _cell(page, run_id: str, column: str) -> str:
    return page.locator(f'[role=row][row-id="{run_id}"] [role=gridcell][col-id="{column}"]').first.inner_text()


def _expected(run, column: str) -> str | float | None:
    kind, name = column.split(".", 1)
    name = name.strip("`")
    value = {"params": run.data.params, "tags": run.data.tags, "metrics": run.data.metrics}[kind].get(name)
    return float(value) if kind == "metrics" and value is not None else value


def test_the_printed_url_opens_the_study_with_its_trials_nested_in_sptunes_columns(study, tmp_path):
    from playwright.sync_api import sync_playwright

    stdout, results, client, runs = study
    experiment_id, parent_id = results["mlflow"]["experiment_id"], results["mlflow"]["parent_run_id"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent_id]
    assert len(children) == sum(SHOWN_TRIALS.values()) + RERUNS and len(runs) == 1 + len(children)
    url = _printed_url(stdout)
    assert f"/#/experiments/{experiment_id}/runs?" in url
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 2200, "height": 1200})
            page.goto(url)
            parent_row = page.locator(f'[role=row][row-id="{parent_id}"]').first
            parent_row.wait_for(timeout=90_000)
            page.get_by_text(f"{len(runs)} matching runs").wait_for(timeout=30_000)
            text = page.locator("body").inner_text()
            assert client.get_experiment(experiment_id).name in text and "Model training" in text
            assert "Detect Issues" not in text  # MLflow 3's GenAI overview, not the runs table
            # The shared view's columns, each headed by its short name.
            for column in VIEW_COLUMNS:
                header = page.locator(f'[role=columnheader][col-id="{column}"]').first.inner_text()
                assert header.strip() == column.split(".", 1)[1].strip("`"), column
            # Collapsed: only the study's run; its + unfolds its trials beneath it.
            assert page.locator(f'[role=row][row-id="{children[0].info.run_id}"]').count() == 0
            parent_row.locator("button[data-component-id*=runnamecellrenderer]").first.click()
            for child in children:
                page.locator(f'[role=row][row-id="{child.info.run_id}"]').first.wait_for(timeout=30_000)
            page.screenshot(path=str(SHOT))
            parent_x = page.locator(f'a[href$="/runs/{parent_id}"]').first.bounding_box()["x"]
            assert page.get_by_text(client.get_run(parent_id).info.run_name, exact=True).count() >= 1
            for child in children:
                link = page.locator(f'a[href$="/runs/{child.info.run_id}"]').first
                assert link.inner_text() == child.info.run_name
                assert link.bounding_box()["x"] > parent_x + 10, "child runs are indented under the study's run"
                for column in VIEW_COLUMNS:
                    shown, held = _cell(page, child.info.run_id, column).strip(), _expected(child, column)
                    if isinstance(held, float):
                        assert float(shown) == pytest.approx(held, rel=1e-3), (child.info.run_name, column)
                    else:
                        assert shown == (held if held is not None else "-"), (child.info.run_name, column)
        finally:
            browser.close()
    assert SHOT.stat().st_size > 50_000
    tested = [c for c in children if "test_acc" in c.data.metrics]
    assert len(tested) == len(results["rows"]) == RERUNS  # each variant's re-run seeds, each with its test_acc


# Each filter documented in dashboards/README.md: which runs it must return, and how many in this study.
FILTERS = {
    "tags.sptune.selected = 'true'": (lambda r: r.data.tags.get("sptune.selected") == "true", 1 + 2 + RERUNS),
    "metrics.test_acc >= 0": (lambda r: "test_acc" in r.data.metrics, RERUNS),
    "params.variant = 'spt' and tags.stage = 'search'": (
        lambda r: r.data.params.get("variant") == "spt" and r.data.tags.get("sptune.phase") == "search",
        SHOWN_TRIALS["spt"]),
    "tags.stage = 'pretrain'": (lambda r: r.data.tags.get("sptune.phase") == "pretrain", SHOWN_TRIALS["pretrain"]),
    "tags.stage = 'rerun'": (lambda r: r.data.tags.get("sptune.phase") == "rerun", RERUNS),
    "tags.sptune.role = 'study'": (lambda r: "mlflow.parentRunId" not in r.data.tags, 1),
    "tags.sptune.status = 'diverged'": (lambda r: r.data.tags.get("sptune.status") == "diverged", None),
}  # fmt: skip


def _documented_filters(repo_root: str) -> list[str]:
    text = (Path(repo_root) / "dashboards" / "README.md").read_text()
    section = text.split("\n## MLflow UI\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([^`]+)` \|", section, re.M)


def test_every_documented_filter_returns_the_runs_it_promises(study, repo_root):
    _, results, client, runs = study
    documented = _documented_filters(repo_root)
    assert sorted(documented) == sorted(FILTERS), "document each filter in FILTERS and test it here"
    tested_ids = {row["mlflow_run_id"] for row in results["rows"]}
    for text, (wanted, count) in FILTERS.items():
        found = {r.info.run_id for r in client.search_runs([results["mlflow"]["experiment_id"]], text)}
        assert found == {r.info.run_id for r in runs if wanted(r)}, text
        assert count is None or len(found) == count, text
    assert tested_ids <= {r.info.run_id for r in runs if r.data.tags.get("sptune.selected") == "true"}
