"""sptune.plan.cost: the dry run's cost estimate (trial-epochs per stage x measured seconds per epoch), checked
against the plan's own counts, on the GPU campaign sweeps/lra_table.yaml with small generated data."""

from __future__ import annotations

import dataclasses
import math
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
        if name == "image":  # d64 x 3: the H100 arithmetic (7 s an epoch), said to be an estimate
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


def _digits_plan(*overrides: str, val_rows: int = 0):
    from sptune.plan.study_plan import build_plan

    inputs = load_inputs(REPO / "search_spaces/digits_quick.yaml", overrides, None)
    return build_plan(inputs.spec, inputs.plan.info, cluster_cpus=2, train_rows=1258, val_rows=val_rows)


def test_a_packed_plan_is_priced_per_pack_epoch_by_the_smallest_pack_entry_that_holds_it():
    plan = _digits_plan("resources.pack=4")
    config = cost.config_of(plan)
    row = {"match": config, "device": "gpu", "train_rows": 1258, "source": "test"}
    solo = {**row, "name": "solo", "seconds": {"pretrain": 100.0, "finetune": 100.0}}
    pack4 = {**row, "name": "pack of 4", "pack": 4, "seconds": {"pretrain": 2.0, "finetune": 3.0}}
    pack8 = {**row, "name": "pack of 8", "pack": 8, "seconds": {"pretrain": 50.0, "finetune": 50.0}}
    packed = cost.stage_pack_epochs(plan)
    # digits_quick at pack 4 (tests/plan/test_packs.py counts each search): pretraining 30 pack-epochs; per variant
    # 50 in its search, then 3 selection packs and 1 re-run pack of 20 epochs each.
    assert (packed.pretrain, packed.finetune) == (30, 2 * (50 + 4 * 20))
    got = cost.estimate(plan, "gpu", (solo, pack8, pack4))
    assert (got.source, got.pack, got.pack_epochs) == ("pack of 4", 4, 290)
    assert got.seconds == pytest.approx(30 * 2.0 + 260 * 3.0)  # pack-epochs, never the 610 member-epochs
    assert cost.estimate(_digits_plan("resources.pack=3"), "gpu", (solo, pack8, pack4)).source == "pack of 4"
    assert cost.estimate(_digits_plan(), "gpu", (pack4, solo)).source == "solo"  # pack 1: the one-trial entry
    assert cost.estimate(_digits_plan(), "gpu", (pack4,)).seconds is None
    big = cost.estimate(_digits_plan("resources.pack=16"), "gpu", (solo, pack8, pack4))
    assert big.seconds is None  # no entry of 16 or more members: unknown, never the smaller packs' seconds
    assert "unknown (no seconds per pack-epoch for packs of 16 or more members" in cost.describe_estimate(big, 1)


def test_a_looped_pack_is_priced_as_its_members_epochs_of_the_one_trial_entry():
    # On a CPU `pack_fusion: auto` loops the members (each its solo loop in turn): K one-trial epochs a pack-epoch.
    plan = _digits_plan("resources.pack=4")
    row = {"match": cost.config_of(plan), "device": "cpu", "train_rows": 1258, "source": "test"}
    solo = {**row, "name": "solo", "seconds": {"pretrain": 1.0, "finetune": 2.0}}
    pack4 = {**row, "name": "pack of 4", "pack": 4, "seconds": {"pretrain": 50.0, "finetune": 50.0}}
    got = cost.estimate(plan, "cpu", (pack4, solo))
    assert got.seconds == pytest.approx(4 * (30 * 1.0 + 260 * 2.0)) and got.pack_epochs == 290
    assert got.source == "4 × one trial's epoch, looped: solo"
    fused = cost.estimate(_digits_plan("resources.pack=4", "resources.pack_fusion=fused"), "cpu", (pack4, solo))
    assert fused.source == "pack of 4" and fused.seconds == pytest.approx(290 * 50.0)
    looped_gpu = cost.estimate(_digits_plan("resources.pack=4", "resources.pack_fusion=looped"), "gpu",
                               ({**solo, "device": "gpu"},))
    assert looped_gpu.seconds == pytest.approx(4 * 550.0)
    assert cost.estimate(_digits_plan("resources.pack=4"), "gpu", ({**solo, "device": "gpu"},)).seconds is None
    # With no entry, what to measure: one trial's epoch where packs loop, a pack's where they fuse.
    assert "no measured seconds per epoch" in cost.describe_estimate(cost.estimate(plan, "cpu", (pack4,)), 1)
    assert "per pack-epoch" in cost.describe_estimate(cost.estimate(plan, "gpu", (pack4,)), 1)


def test_a_packed_estimate_says_pack_time_and_estimated_and_the_cost_counts_pack_epochs():
    plan = _digits_plan("resources.pack=4")
    e = cost.Estimate("gpu", 600.0, "pack target", True, 4, 290)
    line = cost.describe_estimate(e, 2)
    assert line.startswith("gpu: 10.0 min of pack time (290 pack-epochs, one pack at a time; up to 2 packs at once")
    assert "; estimated: pack target)" in line and "measured" not in line and "wall at" not in line
    text = cost.describe_cost(plan)
    assert "  pack-epochs: at most 290 (30 pretraining + 260 finetuning;" in text
    assert "pack-epochs" not in cost.describe_cost(_digits_plan())


def test_the_validation_part_of_an_entry_scales_with_validation_rows():
    plan = _digits_plan(val_rows=100)
    entry = {"match": cost.config_of(plan), "device": "cpu", "train_rows": 2 * 1258, "val_rows": 400,
             "seconds": {"finetune": 10.0}, "val_seconds": {"finetune": 4.0}, "name": "split", "source": "test"}
    assert cost.epoch_seconds(entry, "finetune", plan) == pytest.approx(6.0 / 2 + 4.0 / 4)
    assert cost.epoch_seconds(entry, "pretrain", plan) == pytest.approx(6.0 / 2 + 4.0 / 4)  # finetune's stands in
    unsplit = {k: v for k, v in entry.items() if k != "val_seconds"}
    assert cost.epoch_seconds(unsplit, "finetune", plan) == pytest.approx(10.0 / 2)  # all of it by training rows
    assert cost.epoch_seconds(entry, "finetune", _digits_plan()) == pytest.approx(10.0 / 2)  # validation rows unknown


def test_the_table_s_pack_entries_are_estimates_until_measured_and_hold_one_pack_s_epoch():
    packs = [e for e in cost.measurements() if cost.pack_size(e) > 1]
    assert packs, "call B's study needs a pack entry"
    for entry in packs:
        # Priced from a measured number, never a target: the 8 processes' 2.0 ms per member-step at batch 32, over
        # 45,000 rows, plus the validation split off.
        assert entry["estimate"] is True and "MEASURED" in entry["source"] and "target" not in entry["name"].lower()
        steps = math.ceil(entry["train_rows"] / 32)
        train = entry["seconds"]["pretrain"] - entry["val_seconds"]["pretrain"]
        assert train == pytest.approx(steps * entry["pack"] * 2.0e-3, abs=0.01)


@pytest.fixture(scope="module")
def cifar_dir(tmp_path_factory) -> Path:
    """Random pixels of CIFAR's shape, as many rows as call B's study reads (6,000 training + 1,000 validation)."""
    out = tmp_path_factory.mktemp("cifar")
    rng = np.random.default_rng(0)
    np.savez(out / "cifar10_gray.npz", x_train=rng.integers(0, 256, (7000, 1024), dtype=np.uint8),
             y_train=rng.integers(0, 10, 7000).astype(np.uint8),
             x_test=rng.integers(0, 256, (100, 1024), dtype=np.uint8), y_test=rng.integers(0, 10, 100).astype(np.uint8))
    return out


def test_call_b_s_packed_study_fits_its_call_by_its_own_dry_run(cifar_dir, capsys, monkeypatch):
    # The device machine: 16 cores, one GPU (tools/device/README.md).
    monkeypatch.setattr("sptune.preflight.ready.local_gpus", lambda: 1)
    monkeypatch.setattr("sptune.preflight.ready.local_cpus", lambda: 16)
    monkeypatch.setattr("sptune.study.ray_session.is_connected", lambda: False)
    spec_path = REPO / "search_spaces/cifar_1layer_gpu.yaml"
    assert sweep([str(spec_path), "--data-dir", str(cifar_dir), "--dry-run"]) == 0
    out = capsys.readouterr().out
    spec = load_inputs(spec_path, (), str(cifar_dir)).spec
    assert spec.resources.pack == 8 and spec.finetune.epochs >= 30 and spec.rerun_seeds == 3
    assert spec.lr_extend.max_rounds >= 1 and all(v.search.lr.extend for v in spec.variants.values())
    line = re.search(r"  gpu: ([\d.]+) min of pack time \((\d+) pack-epochs.*; estimated: (.*)\)$", out, re.M)
    assert line is not None, out
    # The sweep's own limit in call B (tools/device/call_b.sh), less 30 s for Ray's start and the collection.
    call_b = (REPO / "tools/device/call_b.sh").read_text()
    limit_s = int(re.search(r"SWEEP_LIMIT_S=\$\{SWEEP_LIMIT_S:-(\d+)\}", call_b).group(1))
    assert float(line.group(1)) * 60 <= limit_s - 30 and "2.0 ms" in line.group(3), (line.group(0), limit_s)
    assert "measured" not in line.group(0)
    assert f"pack-epochs: at most {line.group(2)} " in out


def test_a_campaign_with_packed_studies_adds_pack_time_and_divides_none_of_it(monkeypatch):
    packed, solo = _digits_plan("resources.pack=4"), _digits_plan()
    row = {"match": cost.config_of(solo), "device": "gpu", "train_rows": 1258, "source": "test"}
    table = ({**row, "name": "one", "seconds": {"pretrain": 1.0, "finetune": 1.0}},
             {**row, "name": "four", "pack": 4, "seconds": {"pretrain": 2.0, "finetune": 2.0}})
    monkeypatch.setattr(cost, "measurements", lambda: table)
    solo, packed = dataclasses.replace(solo, concurrency=2), dataclasses.replace(packed, concurrency=2)
    seconds = cost.stage_epochs(solo).total * 1.0 + cost.stage_pack_epochs(packed).total * 2.0
    text = cost.describe_total([solo, packed])
    assert f"  gpu: {cost._hours(seconds)} of trial time" in text and "wall at" not in text
    assert "wall at 2 concurrent trials" in cost.describe_total([solo, solo])
