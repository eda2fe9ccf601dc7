"""The fairness report on hand-made studies (no Ray): a real MLflow SQLite store written with MlflowClient,
results.json and spec.yaml, then build_report, the flags, the tables, the matplotlib figures (SVG, PDF, PNG, and
logged to the parent run), the page rendered from its packaged template, and the page as headless Chromium draws it
(its screenshot: dashboards/screenshots/report.png, shown by dashboards/README.md, rewritten with
SPTUNE_UPDATE_SCREENSHOTS=1).

Two studies, two seeds each:
- "narrow": spt searched a too-narrow grid (1e-4 … 1e-3) and its accuracy still rises at 1e-3 (best on the edge);
  scratch wins at low LRs, spt at high ones (ranking flip); one scratch trial diverged.
- "bracketed" (control, two tasks): both variants on the same 5-point grid, optimum in the middle, spt ahead
  everywhere; as the study does with `rerun_seeds: N`, one LR search, then the selected config re-trained per seed.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient
from PIL import Image

from sptune.judging.stats import paired_delta
from sptune.report import build_report
from sptune.report.__main__ import main
from sptune.report.compute import variant_objectives
from sptune.report.figures import halving_rungs
from sptune.report.flags import edge_side
from sptune.report.page import PACKAGED_TEMPLATE, TEMPLATE_ENV
from sptune.report.records import ReportError
from tests.helpers_browser import CHROMIUM, headless, screenshot_path

REPO = Path(__file__).resolve().parents[2]
SCREENSHOT = screenshot_path("report.png")  # dashboards/README.md shows the committed one
FIGURES = ("lr", "curves", "survival", "delta", "budget")
TASK = "digits"
TASK_OFFSET = {"digits": 0.0, "image": 0.3}  # a harder second task for the multi-task control
SEEDS = ("0", "1")
MAX_EPOCHS = 8  # ASHA grace 2, reduction 2: rungs 2, 4, then 8
GRID5 = [1e-4, 3e-4, 1e-3, 3e-3, 1e-2]
GRID3 = [1e-4, 3e-4, 1e-3]


def peaked(lr: float) -> float:
    """Validation accuracy peaking at 1e-3 (a well-bracketed optimum on GRID5)."""
    return 0.90 - 0.06 * (math.log10(lr) + 3) ** 2


def rising(lr: float) -> float:
    """Still improving at 1e-3: GRID3 stops before the optimum."""
    return 0.95 + 0.2 * (math.log10(lr) + 3)


@dataclass
class Variant:
    kind: str
    grid: list[float]
    acc: Callable[[float], float]
    diverge: set[tuple[str, float]] = field(default_factory=set)  # (seed, lr) pairs that diverge


def _child(client: MlflowClient, exp: str, parent: str, phase: str, variant: str, params: dict,
           history: dict[str, list[float]], summary: dict[str, float], status: str, selected: bool) -> str:
    tags = {"mlflow.parentRunId": parent, "sptune.phase": phase, "sptune.variant": variant, "sptune.status": status}
    if selected:
        tags["sptune.selected"] = "true"
    run_id = client.create_run(exp, run_name=f"{phase}-{variant}", tags=tags).info.run_id
    now = int(time.time() * 1000)
    metrics = [Metric(k, v, now, step) for k, vals in history.items() for step, v in enumerate(vals, 1)]
    metrics += [Metric(k, v, now, 0) for k, v in summary.items()]
    client.log_batch(run_id, metrics=metrics, params=[Param(k, str(v)) for k, v in params.items()])
    client.set_terminated(run_id, "FINISHED")
    return run_id


def _pretrain(client: MlflowClient, exp: str, parent: str, task: str, seeds: tuple[str, ...]) -> None:
    for seed in seeds:
        for i, lr in enumerate((1e-3, 3e-3)):
            curve = [0.2 - 0.01 * e - 0.01 * i for e in range(MAX_EPOCHS)]
            params = {"lr": lr, "batch_size": 32, "seed": seed, "variant": "masked", "phase": "pretrain",
                      "max_epochs": MAX_EPOCHS, "task": task, "kind": "masked", "objective": "masked"}
            _child(client, exp, parent, "pretrain", "masked", params, {"val_loss": curve, "epoch_seconds": [3.0] * 8},
                   {"best_val_loss": min(curve), "best_epoch": MAX_EPOCHS}, "finished", selected=i == 1)


def _finetune(client: MlflowClient, exp: str, parent: str, name: str, v: Variant, seed: str, task: str,
              tested: bool = True) -> dict:
    """One variant's LR search for one seed; returns its results.json row (validation-best trial)."""
    accs = {lr: v.acc(lr) + 0.004 * int(seed) - TASK_OFFSET[task] for lr in v.grid}
    ranked = sorted((lr for lr in v.grid if (seed, lr) not in v.diverge), key=accs.get, reverse=True)
    rank = {lr: i for i, lr in enumerate(ranked)}
    best_lr = ranked[0]
    counts = {"trials": len(v.grid), "diverged": len(v.grid) - len(ranked), "failed": 0, "trial_epochs": 0}
    for lr in v.grid:
        diverged = lr not in rank
        # ASHA-like: the best trial runs to the end, the runner-up to the second rung, the rest stop at grace.
        epochs = 2 if diverged else {0: MAX_EPOCHS, 1: 4}.get(rank[lr], 2)
        counts["trial_epochs"] += epochs
        curve = [0.1] * epochs if diverged else [accs[lr] * (0.55 + 0.45 * e / epochs) for e in range(1, epochs + 1)]
        summary = {} if diverged else {"best_val_acc": curve[-1], "best_epoch": epochs}
        if lr == best_lr:
            summary.update(selected_epoch=epochs, **({"test_acc": accs[lr] - 0.01} if tested else {}))
        params = {"lr": lr, "batch_size": 32, "seed": seed, "variant": name, "phase": "search",
                  "max_epochs": MAX_EPOCHS, "task": task, "kind": v.kind}
        history = {"val_acc": curve, "epoch_seconds": [1.0] * epochs}
        run_id = _child(client, exp, parent, "search", name, params, history, summary,
                        "diverged" if diverged else "finished", selected=lr == best_lr)
        if lr == best_lr:
            row = {"variant": name, "kind": v.kind, "task": task, "seed": int(seed), "lr": lr, "batch_size": 32,
                   "best_epoch": epochs, "val_acc": accs[lr], "test_acc": accs[lr] - 0.01, "mlflow_run_id": run_id}
    return {**row, **counts}


def _reruns(client: MlflowClient, exp: str, parent: str, name: str, v: Variant, task: str, search: dict) -> list:
    """The selected config re-trained once per seed (phase "rerun", no early stopping), as the study does."""
    rows = []
    for seed in SEEDS:
        acc = v.acc(search["lr"]) + 0.004 * int(seed) - TASK_OFFSET[task]
        curve = [acc * (0.55 + 0.45 * e / MAX_EPOCHS) for e in range(1, MAX_EPOCHS + 1)]
        params = {"lr": search["lr"], "batch_size": 32, "seed": seed, "variant": name, "phase": "rerun",
                  "max_epochs": MAX_EPOCHS, "task": task, "kind": v.kind}
        summary = {"best_val_acc": acc, "best_epoch": MAX_EPOCHS, "selected_epoch": MAX_EPOCHS, "test_acc": acc - 0.01}
        run_id = _child(client, exp, parent, "rerun", name, params, {"val_acc": curve, "epoch_seconds": [1.0] * 8},
                        summary, "finished", selected=True)
        rows.append({**search, "seed": int(seed), "val_acc": acc, "test_acc": acc - 0.01, "mlflow_run_id": run_id})
    return rows


def _task_runs(client: MlflowClient, exp: str, parent: str, task: str, variants: dict[str, Variant],
               reruns: bool) -> list[dict]:
    if not reruns:  # an LR search per seed
        _pretrain(client, exp, parent, task, SEEDS)
        return [_finetune(client, exp, parent, n, v, seed, task) for n, v in variants.items() for seed in SEEDS]
    _pretrain(client, exp, parent, task, SEEDS[:1])  # one search, then the winner re-trained per seed
    searches = {n: _finetune(client, exp, parent, n, v, SEEDS[0], task, tested=False) for n, v in variants.items()}
    return [row for n, v in variants.items() for row in _reruns(client, exp, parent, n, v, task, searches[n])]


def write_study(root: Path, name: str, variants: dict[str, Variant], template_db: Path,
                tasks: tuple[str, ...] = (TASK,), reruns: bool = False) -> Path:
    root.mkdir(parents=True)
    shutil.copy(template_db, root / "mlflow.db")  # creating MLflow's schema costs seconds; copying it does not
    uri = f"sqlite:///{(root / 'mlflow.db').resolve()}"
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment(name, artifact_location=(root / "mlartifacts").resolve().as_uri())
    parent = client.create_run(exp, run_name=name, tags={"sptune.role": "study"}).info.run_id
    client.log_batch(parent, params=[Param("output_dir", str(root.resolve())), Param("task", TASK)])
    rows = [row for task in tasks for row in _task_runs(client, exp, parent, task, variants, reruns)]
    client.set_terminated(parent, "FINISHED")
    results = {"study": name, "task": TASK, "rows": rows, "timeline": [{"stage": "pretrain", "start": 0, "end": 40}],
               "mlflow": {"tracking_uri": uri, "experiment_id": exp, "parent_run_id": parent}}
    (root / "results.json").write_text(json.dumps(results))
    spec = {"name": name, "task": {"name": TASK}, "finetune": {"epochs": MAX_EPOCHS},
            "scheduler": {"type": "asha", "grace_period": 2, "reduction_factor": 2},
            "variants": {n: {"kind": v.kind, "search": {"lr": {"type": "grid", "values": v.grid},
                                                        "batch_size": {"type": "choice", "values": [32]}}}
                         for n, v in variants.items()}}
    (root / "spec.yaml").write_text(yaml.safe_dump(spec))
    return root


def _fast_dir(tmp_path_factory) -> tuple[Path, bool]:
    """MLflow commits (fsyncs) every call to SQLite; in RAM-backed /dev/shm that is ~3x faster than on disk."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        return Path(tempfile.mkdtemp(prefix="sptune-report-", dir=shm)), True
    return tmp_path_factory.mktemp("report"), False


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    root, in_ram = _fast_dir(tmp_path_factory)
    template = root / "empty.db"
    MlflowClient(tracking_uri=f"sqlite:///{template}").search_experiments()
    narrow = write_study(root / "narrow", "narrow <grid> & co", {
        "scratch": Variant("scratch", GRID5, peaked, diverge={("1", 1e-2)}),
        "spt": Variant("spt", GRID3, rising),
    }, template)
    control = write_study(root / "bracketed", "bracketed", {
        "scratch": Variant("scratch", GRID5, peaked),
        "spt": Variant("spt", GRID5, lambda lr: peaked(lr) + 0.04),
    }, template, tasks=("digits", "image"), reruns=True)
    yield {"narrow": build_report(narrow), "control": build_report(control)}
    if in_ram:
        shutil.rmtree(root, ignore_errors=True)


def flag_levels(page: str) -> dict[str, str]:
    return dict((k, lvl) for lvl, k in re.findall(r'<section class="flag (\w+)[^"]*" data-flag="([\w-]+)"', page))


def flag_text(page: str, key: str) -> str:
    return re.search(rf'data-flag="{key}".*?</section>', page, re.S).group(0)


FAIRNESS_KEYS = ("lr-edge", "rank-flip", "fewer-trials", "diverged")


def test_flags_raised_for_narrow_grid_flip_and_divergence(reports):
    page = reports["narrow"].read_text()
    levels = flag_levels(page)
    assert {k: levels[k] for k in FAIRNESS_KEYS} == dict.fromkeys(FAIRNESS_KEYS, "warn")
    edge = flag_text(page, "lr-edge")
    assert "spt on digits" in edge and "best LR 1e-3 (2/2 seeds) is the highest value" in edge
    assert "scratch on digits" not in edge  # scratch's optimum (1e-3) is inside its grid
    flip = flag_text(page, "rank-flip")
    assert "scratch vs spt on digits" in flip and "scratch ahead at LR≈1e-4" in flip and "spt ahead at LR≈1e-3" in flip
    assert "spt on digits: 6 completed trials of 6" in flag_text(page, "fewer-trials")
    assert "scratch on digits: 1 diverged, 0 failed of 10 at LR 1e-2" in flag_text(page, "diverged")
    assert "spt on digits used" in flag_text(page, "compute")  # SPT pretraining counted on top of finetuning


def test_no_flags_for_well_bracketed_control(reports):
    page = reports["control"].read_text()
    levels = flag_levels(page)
    assert {k: levels[k] for k in FAIRNESS_KEYS} == dict.fromkeys(FAIRNESS_KEYS, "ok")
    assert levels["compute"] == "warn" and "1 fairness flag raised" in page  # SPT pretraining cost is real
    # ASHA survival of the one LR search (grace 2, reduction 2, 8 epochs -> rungs 2, 4, 8); seed re-runs excluded.
    assert "scratch: 5/5 trials reached epoch 2" in page and "scratch: 1/5 trials reached epoch 8" in page
    assert "SPT pretraining (masked): 2/2 trials reached epoch 8" in page


def test_table_aggregates_seeds_and_pairs_deltas(reports):
    page = reports["control"].read_text()
    assert '<table class="results">' in page and "n=2 seeds" in page and "paired by seed" in page
    assert "(95 % t-interval, n = 2)" in page and "<th>digits</th><th>image</th>" in page  # tasks as columns
    md = (reports["control"].parent / "report.md").read_text()
    assert "| variant | digits | image |" in md
    # Two seeds: t(0.975, 1) = 12.71 times the standard error 0.20 pt; the per-seed Δ does not vary.
    assert ("| spt | 93.20 ± 0.28 [90.66, 95.74] (95 % t-interval, n = 2)<br>Δ +4.00 ± 0.00 [+4.00, +4.00] "
            "(95 % t-interval, paired by seed, n = 2: seeds 0, 1) vs scratch (like-for-like: both bidirectional) | "
            "63.20 ± 0.28 [60.66, 65.74] (95 % t-interval, n = 2)") in md
    csv_lines = (reports["control"].parent / "results.csv").read_text().splitlines()
    assert len(csv_lines) == 5 and csv_lines[2].startswith("digits,spt,spt,2,0;1,0.932")


def test_moved_run_directory_uses_its_own_store(reports, tmp_path):
    moved = tmp_path / "moved"
    shutil.copytree(reports["narrow"].parent, moved)
    results = json.loads((moved / "results.json").read_text())
    results["mlflow"]["tracking_uri"] = "sqlite:////nonexistent/mlflow.db"  # recorded path no longer exists
    (moved / "results.json").write_text(json.dumps(results))
    page = build_report(moved).read_text()
    assert flag_levels(page)["lr-edge"] == "warn" and page.count("<svg") >= 3


def test_text_is_escaped(reports):
    page = reports["narrow"].read_text()
    assert "narrow &lt;grid&gt; &amp; co" in page and "<grid>" not in page


def test_cli_from_run_id_and_bad_target(reports, tmp_path, capsys):
    results = json.loads((reports["control"].parent / "results.json").read_text())
    ml = results["mlflow"]
    out = tmp_path / "by_id" / "report.html"
    assert main([ml["parent_run_id"], "--tracking-uri", ml["tracking_uri"], "--out", str(out)]) == 0
    assert out.is_file() and (out.parent / "results.csv").is_file()
    assert 'data-flag="lr-edge"' in out.read_text()
    # MLflow alone (no results.json anywhere): rows rebuilt from the selected seed re-runs.
    alone = build_report(tmp_path / "alone", tracking_uri=ml["tracking_uri"], parent_run_id=ml["parent_run_id"])
    md = (alone.parent / "report.md").read_text()
    assert "| spt | 93.20 ± 0.28 [90.66, 95.74] (95 % t-interval, n = 2)<br>Δ +4.00" in md
    assert "| variant | digits | image |" in md
    assert main([str(tmp_path / "nowhere")]) == 2
    assert "neither a study output directory nor an MLflow run id" in capsys.readouterr().err


def test_edge_rules_for_ranges_and_tried_lrs():
    loguniform = {"type": "loguniform", "low": 1e-4, "high": 1e-2}
    assert edge_side(8e-3, loguniform, [])[0] == "high"
    assert edge_side(1.4e-4, loguniform, [])[0] == "low"
    assert edge_side(1e-3, loguniform, []) is None
    assert edge_side(5e-3, None, [1e-4, 1e-3, 5e-3])[0] == "high"  # no spec: the highest LR tried
    assert edge_side(1e-3, None, [1e-4, 1e-3, 5e-3]) is None


def test_rungs_and_statistics():
    asha = {"scheduler": {"type": "asha", "grace_period": 5, "reduction_factor": 2}}
    assert halving_rungs(asha, 20, []) == [5, 10, 20]
    assert halving_rungs({}, 20, [5, 20, 5, 10]) == [5, 10, 20]
    hyperband = {"scheduler": {"type": "hyperband", "grace_period": 2, "reduction_factor": 3}}
    assert halving_rungs(hyperband, 16, [2, 6, 16]) == [2, 6, 16]  # its brackets stop on sha's ladder
    d = paired_delta({"0": 0.95, "1": 0.97}, {"0": 0.90, "1": 0.93})
    assert d.paired and d.mean == pytest.approx(0.045)
    assert paired_delta({"0": 0.95}, {"1": 0.90}).paired is False


def _chromium(url: str, out_dir: Path, *extra: str) -> subprocess.CompletedProcess:
    cmd = headless(out_dir / "profile", "--hide-scrollbars", "--window-size=1400,2400", *extra, url)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=out_dir)


@pytest.mark.skipif(not os.path.exists(CHROMIUM), reason=f"{CHROMIUM} is not installed; cannot render the report")
def test_browser_renders_table_figures_and_flags(reports, tmp_path):
    url = reports["narrow"].resolve().as_uri()
    dom = _chromium(url, tmp_path, "--dump-dom").stdout
    assert '<table class="results">' in dom
    assert {f"digits-{f}" for f in FIGURES} <= set(re.findall(r'<figure data-figure="([\w.-]+)"', dom))
    assert len(re.findall(r"<svg\b", dom)) == len(FIGURES)  # each figure inline, drawn as SVG paths and text
    assert "learning rate (log scale)" in dom and "scratch: 10/10 trials reached epoch 2" in dom
    assert {k: flag_levels(dom).get(k) for k in ("lr-edge", "rank-flip")} == {"lr-edge": "warn", "rank-flip": "warn"}
    _chromium(url, tmp_path, f"--screenshot={SCREENSHOT}")
    with Image.open(SCREENSHOT) as img:
        assert img.size == (1400, 2400)
        # Not a blank page: many colours (the flags' orange, the figures' palette), not one background.
        colors = img.convert("RGB").getcolors(maxcolors=1 << 20)
        assert len(colors) > 200 and max(n for n, _ in colors) < 0.9 * 1400 * 2400
    print(f"screenshot: {SCREENSHOT}")


def test_compute_counts_the_pretraining_each_kind_builds_on_by_the_kinds_table():
    """One rule with the spec (variant_kinds.as_built): `spt` and `spt_cross` follow pretrain.objective."""
    kinds = {"a": "spt", "b": "spt_cross", "c": "qk_init", "d": "spt_causal", "e": "scratch_causal", "f": "other"}
    assert variant_objectives({"pretrain": {"objective": "causal"}}, kinds) == {
        "a": "causal", "b": "causal", "c": "masked", "d": "causal", "e": None, "f": None}
    assert variant_objectives({}, kinds)["b"] == "masked"


# ---------------------------------------------------------------- figures, template, MLflow artifacts


def test_figures_are_written_as_svg_pdf_and_png(reports):
    import xml.etree.ElementTree as ET

    for study, tasks in (("narrow", ("digits",)), ("control", ("digits", "image"))):
        fig_dir = reports[study].parent / "figures"
        for stem in (f"{t}-{f}" for t in tasks for f in FIGURES):
            svg = (fig_dir / f"{stem}.svg").read_text()
            assert ET.fromstring(svg).tag == "{http://www.w3.org/2000/svg}svg" and "<svg" in svg, stem
            assert (fig_dir / f"{stem}.pdf").read_bytes().startswith(b"%PDF"), stem
            with Image.open(fig_dir / f"{stem}.png") as png:
                png.verify()
            with Image.open(fig_dir / f"{stem}.png") as png:  # ~110 dpi on a 6.4-inch-wide figure
                assert png.format == "PNG" and 650 <= png.size[0] <= 750, (stem, png.size)
    # The numbers are drawn, as text: Δ with its variant pair, and the LR axis in the report's LR notation.
    delta = (reports["control"].parent / "figures" / "digits-delta.svg").read_text()
    assert "spt vs scratch" in delta and "+4.00" in delta
    assert all(t in (reports["narrow"].parent / "figures" / "digits-lr.svg").read_text() for t in ("1e-4", "1e-2"))


def test_expected_best_validation_vs_budget_figure(reports):
    """Per variant, from all its search trials: the mean at n = 1, the best at n = all."""
    page = reports["narrow"].read_text()
    figure = re.search(r'<figure data-figure="digits-budget">.*?</figure>', page, re.S).group(0)
    assert "digits: expected best validation accuracy vs search budget" in figure
    # The diverged trial counts with the best its curve reached before it diverged (0.1).
    scratch = [peaked(lr) + 0.004 * int(seed) for seed in SEEDS for lr in GRID5 if (seed, lr) != ("1", 1e-2)] + [0.1]
    spt = [rising(lr) + 0.004 * int(seed) for seed in SEEDS for lr in GRID3]
    assert f"scratch: {sum(scratch) / 10:.4f} with 1 trial, {max(scratch):.4f} with 10" in figure
    assert f"spt: {sum(spt) / 6:.4f} with 1 trial, {max(spt):.4f} with 6" in figure
    assert "order flips" not in figure  # spt is ahead at every budget both reach
    assert "search trials (n)" in (reports["narrow"].parent / "figures" / "digits-budget.svg").read_text()


def test_page_is_self_contained_no_scripts_no_network(reports):
    for study in ("narrow", "control"):
        page = reports[study].read_text()
        assert "<script" not in page.lower() and "javascript:" not in page.lower()
        # Nothing fetched: no http(s) at all (not even SVG's namespace URLs, which the inline SVG drops).
        assert not re.search(r"https?:", page) and "@import" not in page and "<link" not in page
        # Every link is a figure file next to the page (or an anchor in it); every figure is inline.
        links = re.findall(r'(?:href|src)="([^"]*)"', page)
        assert links and all(x.startswith(("#", "figures/")) for x in links), links
        assert all((reports[study].parent / x).is_file() for x in links if x.startswith("figures/"))
        ids = re.findall(r'\bid="([^"]+)"', page)
        assert len(ids) == len(set(ids))  # the inlined figures' ids never collide


@pytest.fixture(scope="module")
def restyled(reports, tmp_path_factory):
    """The narrow study rendered from a modified copy of the packaged template, with Optuna importances given."""
    copy = tmp_path_factory.mktemp("dash") / "template"
    shutil.copytree(PACKAGED_TEMPLATE, copy)
    template = copy / "report.html.j2"
    template.write_text(template.read_text().replace("<h2>Results</h2>", "<h2>Results</h2><p>MARKER-r12</p>"))
    css = copy / "report.css"
    css.write_text(css.read_text() + "\n.marker-css-r12{color:red}\n")
    out = tmp_path_factory.mktemp("restyled") / "report.html"
    importances = {"scratch": {"lr": 0.81, "batch_size": 0.19}, "spt": {}}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(TEMPLATE_ENV, str(copy))
        return build_report(reports["narrow"].parent, out=out, importances=importances)


def test_page_is_rendered_from_the_template_folder_given(reports, restyled, tmp_path, monkeypatch):
    page = restyled.read_text()
    assert "<p>MARKER-r12</p>" in page and ".marker-css-r12{color:red}" in page  # template and inlined CSS
    assert "MARKER-r12" not in reports["narrow"].read_text()
    monkeypatch.setenv(TEMPLATE_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(ReportError, match=re.escape(str(tmp_path / "nowhere" / "report.html.j2"))):
        build_report(reports["narrow"].parent, out=tmp_path / "r.html")


def test_importances_section_and_figures(reports, restyled):
    page = restyled.read_text()
    section = page[page.index('id="importances"'):page.index("Selected configuration per seed")]
    assert "Hyperparameter importances (Optuna)" in page
    assert re.search(r'data-importances="scratch".*<td class="l">lr</td><td>0\.810</td>.*batch_size', section, re.S)
    assert 'data-importances="spt"' not in section  # a variant without importances is left out
    figs = restyled.parent / "figures"
    assert all((figs / f"importances-scratch.{ext}").is_file() for ext in ("svg", "pdf", "png"))
    assert "Hyperparameter importances" not in reports["narrow"].read_text()  # none given: the section is hidden


def test_figures_and_page_are_logged_to_the_mlflow_parent_run(reports):
    ml = json.loads((reports["control"].parent / "results.json").read_text())["mlflow"]
    client = MlflowClient(tracking_uri=ml["tracking_uri"])
    logged = {a.path for a in client.list_artifacts(ml["parent_run_id"], "figures")}
    expected = {f"figures/{t}-{f}.{ext}" for t in ("digits", "image") for f in FIGURES for ext in ("svg", "pdf", "png")}
    assert expected <= logged
    assert {"report/report.html", "report/report.md", "report/results.csv"} <= {
        a.path for a in client.list_artifacts(ml["parent_run_id"], "report")}
    assert client.get_run(ml["parent_run_id"]).info.status == "FINISHED"  # logging left the run as it was


def test_report_without_mlflow_draws_what_results_json_has(reports, tmp_path):
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(reports["control"].parent / "results.json", alone)
    results = json.loads((alone / "results.json").read_text())
    results.pop("mlflow")
    (alone / "results.json").write_text(json.dumps(results))
    page = build_report(alone).read_text()
    assert "No MLflow store found" in page and '<table class="results">' in page
    assert sorted(p.name for p in (alone / "figures").glob("*.svg")) == ["digits-delta.svg", "image-delta.svg"]


def test_matplotlib_is_imported_only_when_a_report_is_built():
    code = "import sys, sptune.sweep, sptune.report; print('matplotlib' in sys.modules, 'jinja2' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.stdout.split() == ["False", "False"], out.stderr


def test_one_lr_one_variant_draws_without_warnings(tmp_path):
    """The smallest study (as a campaign's cells often are): one LR, no baseline, so no Δ figure and a one-LR axis."""
    import warnings

    MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'empty.db'}").search_experiments()
    one = write_study(tmp_path / "one", "one", {"spt": Variant("spt", [1e-3], peaked)}, tmp_path / "empty.db")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # e.g. a singular log axis, or a layout that collapsed
        build_report(one)
    # Two search trials (one per seed) at the one LR: a two-point budget curve.
    assert sorted(p.stem for p in (one / "figures").glob("*.png")) == [
        "digits-budget", "digits-curves", "digits-lr", "digits-survival"]



def test_failures_flag_counts_what_tune_retried_once_per_search(tmp_path):
    from sptune.report.flags import flag_failures
    from sptune.report.records import ReportData

    # Both seed rows of scratch repeat its search's count (2); spt's search had none.
    rows = [{"task": "digits", "variant": "scratch", "failures": 2}, {"task": "digits", "variant": "scratch",
            "failures": 2}, {"task": "digits", "variant": "spt", "failures": 0}]
    data = ReportData("s", tmp_path, rows, [], {}, [], "results.json")
    flag = flag_failures(data, ["digits"], ["scratch", "spt"])
    assert (flag.level, flag.items) == ("info", ["scratch on digits: 2 trial failures"])
    data.rows = rows[2:]
    assert flag_failures(data, ["digits"], ["scratch", "spt"]).level == "ok"


def _search_trial(lr: float, best: float, status: str = "finished"):
    from sptune.plan.phases import Phase
    from sptune.report.records import Trial

    return Trial(run_id=f"r{lr}", phase=Phase.SEARCH, variant="spt", variant_kind="spt", task="pathfinder", seed="0",
                 lr=lr, batch_size="32", status=status, selected=False, max_epochs=5, best_val_acc=best, test_acc=None,
                 selected_epoch=None, curve=[(1, best)], seconds=1.0, epochs=1)


def test_a_search_whose_every_lr_scores_the_same_is_flagged_as_learning_nothing(tmp_path):
    """What sweeps/pathfinder32_budget.yaml showed: every LR of every study at val 0.535 (one class)."""
    from sptune.report.flags import flag_learned_nothing
    from sptune.report.records import ReportData

    flat = [_search_trial(lr, 0.535) for lr in (3e-4, 1e-3, 3e-3)]
    data = ReportData("s", tmp_path, [], flat, {}, [], "results.json")
    flag = flag_learned_nothing(data, ["pathfinder"], ["spt"])
    assert flag.level == "warn"
    assert flag.items == ["spt on pathfinder: all 3 search trials (LR 3e-4, 1e-3, 3e-3) ended at the same best "
                          "validation accuracy, 0.5350."]
    data.trials = [*flat[:2], _search_trial(3e-3, 0.62)]  # one LR learned something
    assert flag_learned_nothing(data, ["pathfinder"], ["spt"]).level == "ok"
    data.trials = [*flat[:2], _search_trial(1e-2, 0.0, "diverged")]  # two alike are not enough to say
    assert flag_learned_nothing(data, ["pathfinder"], ["spt"]).level == "ok"


def test_a_budget_figure_needs_a_variant_with_two_trials():
    from sptune.report.plots.expected_max_curve import figure_budget

    assert figure_budget({"spt": [0.5]}, {}, {"spt": "#000000"}) is None
    assert figure_budget({"spt": [0.5, 0.6], "scratch": [0.55, 0.58]}, {"spt": [2]},
                         {"spt": "#000000", "scratch": "#0072B2"}) is not None
