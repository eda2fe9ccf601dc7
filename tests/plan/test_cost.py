"""sptune.plan.cost: the dry run's cost estimate (trial-epochs per stage x measured seconds per epoch), checked
against the plan's own counts, on the GPU campaign sweeps/lra_table.yaml with small generated data."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from sptune.data import main as data_cli
from sptune.plan import cost
from sptune.preflight.inputs import load_inputs
from sptune.sweep import main as sweep

REPO = Path(__file__).resolve().parents[2]
STUDIES = ("image", "image_rotary", "listops", "text", "retrieval", "pathfinder")


@pytest.fixture(scope="module")
def lra_dir(tmp_path_factory) -> Path:
    """Every dataset lra_table.yaml names, small: the offline generators, and random CIFAR-shaped pixels."""
    out = tmp_path_factory.mktemp("lra")
    for argv in (["listops", "--n-train", "200", "--n-val", "50", "--n-test", "50"],
                 ["retrieval", "--n-train", "200", "--n-val", "50", "--n-test", "50"],
                 ["pathfinder", "--n", "100"], ["text", "--n-train", "2600", "--n-test", "50"]):
        assert data_cli(["generate", *argv, "--out", str(out)]) == 0
    rng = np.random.default_rng(0)
    np.savez(out / "cifar10_gray.npz", x_train=rng.integers(0, 256, (6000, 1024), dtype=np.uint8),
             y_train=rng.integers(0, 10, 6000).astype(np.uint8),
             x_test=rng.integers(0, 256, (100, 1024), dtype=np.uint8), y_test=rng.integers(0, 10, 100).astype(np.uint8))
    return out


def _sections(text: str) -> dict[str, str]:
    parts = re.split(r"^=== study (\S+) ===$", text, flags=re.M)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_lra_table_dry_run_prints_trial_epochs_and_hours_where_measured(lra_dir, capsys, monkeypatch):
    # Planned for the GPU machine it names (4 CPUs and 1 GPU a trial), from this one.
    monkeypatch.setattr("sptune.preflight.ready.local_gpus", lambda: 8)
    monkeypatch.setattr("sptune.preflight.ready.local_cpus", lambda: 32)
    monkeypatch.setattr("sptune.study.ray_session.is_connected", lambda: False)  # not the suite's shared Ray
    assert sweep([str(REPO / "sweeps/lra_table.yaml"), "--data-dir", str(lra_dir), "--dry-run"]) == 0
    out = capsys.readouterr().out
    sections = _sections(out)
    assert tuple(sections) == STUDIES
    totals = {}
    for name, text in sections.items():
        planned = int(re.search(r"at most (\d+) trial-epochs", text).group(1))
        cost_line = r"Cost: (\d+) trial-epochs \((\d+) pretraining \+ (\d+) finetuning\) on (\d+) training rows"
        total, pre, fine, rows = map(int, re.search(cost_line, text).groups())
        assert total == planned == pre + fine and pre > 0 and fine > 0  # the plan's own count, split by stage
        assert "re-trained with seeds 1000–1002" in text  # 3 seeds per variant: their re-runs are in the count
        if name == "image":  # d64 x 3: issue 33's arithmetic (7 s an epoch), said to be an estimate
            assert re.search(r"  gpu: [\d.,]+ (h|min) of trial time \(.*; estimated: CIFAR-LRA 3 layers", text)
        else:  # no GPU number: never a guess, and the line says how to get one
            hint = "`python tools/epoch_seconds.py --spec SPEC` on a GPU and add it to sptune/plan/epoch_seconds.yaml)"
            assert f"  gpu: unknown (no measured seconds per epoch for this config on a GPU: measure one with {hint}" \
                   in text
        totals[name] = (pre, fine, rows)
    # Image is the one config with a CPU measurement (BENCHMARKS.md §7: 2,177 s SPT / 2,206 s finetune on 45k rows).
    pre, fine, rows = totals["image"]
    hours = (pre * 2177 + fine * 2206) * rows / 45000 / 3600
    shown = re.search(r"  cpu: ([\d.,]+ h) of trial time", sections["image"]).group(1)
    assert shown == cost._hours(hours * 3600)  # as printed: 2 decimals, whole hours from 10 h
    assert float(shown.removesuffix(" h").replace(",", "")) == pytest.approx(hours, rel=0.01, abs=0.5)
    assert "  cpu: unknown" in sections["listops"]
    campaign = re.search(r"Campaign cost: (\d+) trial-epochs over 6 studies", out)
    assert int(campaign.group(1)) == sum(p + f for p, f, _ in totals.values())
    assert "cpu: unknown (5 of 6 studies" in out
    assert "gpu: unknown (5 of 6 studies have no measured seconds per epoch; measure one with" in out


def test_the_measurement_the_unknown_cost_names_runs(tmp_path, repo_root):
    """`tools/epoch_seconds.py --spec SPEC`, as the dry run's hint writes it, measures both stages (tiny here)."""
    import json
    import os
    import subprocess
    import sys

    out = tmp_path / "seconds.json"
    cmd = [sys.executable, "tools/epoch_seconds.py", "--spec", "search_spaces/digits_quick.yaml", "--steps", "1",
           "--val-rows", "8", "--json", str(out)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [repo_root, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(cmd, cwd=repo_root, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    stages = json.loads(out.read_text())["stages"]
    assert set(stages) == {"spt", "finetune"} and all(s["wall_s"] > 0 and s["cpu_s"] > 0 for s in stages.values())


def test_stage_epochs_counts_pretraining_reruns_like_the_plan():
    inputs = load_inputs(REPO / "search_spaces/digits_quick.yaml", ("rerun_pretrain=true",), None)
    plan = inputs.plan
    epochs = cost.stage_epochs(plan)
    # digits_quick: 20-epoch pretraining and finetuning, 3 seeds: each re-run adds 20 epochs to its stage.
    without = cost.stage_epochs(load_inputs(REPO / "search_spaces/digits_quick.yaml", (), None).plan)
    assert epochs.pretrain - without.pretrain == 3 * 20
    assert epochs.finetune == without.finetune
    from sptune.plan.dry_run_text import describe

    assert f"at most {epochs.total} trial-epochs" in describe(plan)


def test_estimate_scales_a_measurement_by_training_rows_and_needs_an_exact_match():
    plan = load_inputs(REPO / "search_spaces/digits_quick.yaml", (), None).plan
    config, epochs = cost.config_of(plan), cost.stage_epochs(plan)
    entry = {"name": "digits test", "match": config, "device": "cpu", "train_rows": 2 * plan.train_rows,
             "seconds": {"pretrain": 2.0, "finetune": 4.0}}
    got = cost.estimate(plan, "cpu", (entry,))
    assert got.seconds == pytest.approx((epochs.pretrain * 2.0 + epochs.finetune * 4.0) / 2)
    assert cost.estimate(plan, "gpu", (entry,)).seconds is None
    other = {**entry, "match": {**config, "n_layers": config["n_layers"] + 1}}
    assert cost.estimate(plan, "cpu", (other,)).seconds is None
    assert "unknown" in cost.describe_estimate(cost.estimate(plan, "cpu", (other,)), 2)


def test_every_measurement_says_where_it_came_from():
    for entry in cost.measurements():
        assert entry["device"] in cost.DEVICES and entry["train_rows"] > 0 and entry["source"].strip()
        assert set(entry["match"]) == {"task", "seq_len", "d_model", "n_layers", "n_heads", "d_ff"}


def test_the_wall_time_divides_by_the_trials_the_gpus_hold():
    from sptune.plan.study_plan import build_plan

    spec = load_inputs(REPO / "search_spaces/digits_quick.yaml", ("resources.gpu=0.125",), None).spec
    plan = build_plan(spec, load_inputs(REPO / "search_spaces/digits_quick.yaml", (), None).plan.info,
                      cluster_cpus=16, cluster_gpus=1)
    line = cost.describe_estimate(cost.Estimate("gpu", 8 * 3600.0, "a GPU"), plan.concurrency)
    assert "8.00 h of trial time (1.00 h wall at 8 concurrent trials" in line  # 16 cores, but 8 GPU shares


def test_an_estimated_entry_is_printed_as_estimated_never_as_measured():
    plan = load_inputs(REPO / "search_spaces/digits_quick.yaml", (), None).plan
    entry = {"name": "digits guess", "match": cost.config_of(plan), "device": "gpu", "train_rows": plan.train_rows,
             "seconds": {"pretrain": 1.0, "finetune": 1.0}}
    measured = cost.estimate(plan, "gpu", (entry,))
    guessed = cost.estimate(plan, "gpu", ({**entry, "estimate": True},))
    assert guessed.seconds == measured.seconds and guessed.estimated and not measured.estimated
    assert "; measured: digits guess)" in cost.describe_estimate(measured, 1)
    line = cost.describe_estimate(guessed, 1)
    assert "; estimated: digits guess)" in line and "measured" not in line


def test_short_studies_are_printed_in_minutes():
    assert cost._hours(328) == "5.5 min"
    assert cost._hours(3600) == "1.00 h" and cost._hours(40_000) == "11 h"


@pytest.fixture(scope="module")
def cifar_shaped(tmp_path_factory) -> Path:
    """CIFAR's shapes at full size (50,000 training rows, so the plan has the real 45,000), blank pixels."""
    out = tmp_path_factory.mktemp("cifar_shaped")
    np.savez(out / "cifar10_gray.npz", x_train=np.zeros((50_000, 1024), np.uint8),
             y_train=np.arange(50_000, dtype=np.uint8) % 10, x_test=np.zeros((100, 1024), np.uint8),
             y_test=np.arange(100, dtype=np.uint8) % 10)
    return out


def test_the_device_kits_gpu_study_fits_its_seven_minutes(cifar_shaped, capsys, monkeypatch):
    """cifar_1layer_gpu.yaml runs inside one device call (tools/device/call_b.sh): its dry run's GPU line, one trial
    at a time (no credit for the 8 trials sharing the GPU), stays within the call's 7 minutes."""
    monkeypatch.setattr("sptune.preflight.ready.local_gpus", lambda: 1)  # planned for the device, from this machine
    monkeypatch.setattr("sptune.study.ray_session.is_connected", lambda: False)  # not the suite's shared Ray
    spec = REPO / "search_spaces/cifar_1layer_gpu.yaml"
    assert sweep([str(spec), "--data-dir", str(cifar_shaped), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "on 45000 training rows" in out
    minutes = float(re.search(r"  gpu: ([\d.]+) min of trial time", out).group(1))
    assert 0 < minutes <= 7.0
