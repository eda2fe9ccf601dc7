"""A campaign: several studies (an ablation axis) expanded, refused or planned as one. Run as one (SPT pretrained once,
rows merged): tests/e2e/test_campaign_run.py."""

from __future__ import annotations

from pathlib import Path

from sptune.rules.budgets import variant_budget
from sptune.sweep import main

SPEC = """
name: camp
task: {name: digits}
model: {d_model: 32, n_layers: 1, n_heads: 4, d_ff: 64}
pretrain:
  epochs: 1
  num_samples: 1
  search: {lr: {type: grid, values: [1.0e-3]}, batch_size: {type: choice, values: [32]}}
finetune: {epochs: 1, num_samples: 1}
variants:
  spt: {search: {lr: {type: grid, values: [1.0e-3]}, batch_size: {type: choice, values: [32]}}}
scheduler: {type: fifo}
"""

CAMPAIGN = """
campaign: tiny
studies:
  - spec: camp.yaml
    name: frac
    axes: {task.train_fraction: [0.5, 1.0]}
"""


def test_campaign_refuses_a_bad_study_before_running_any(tmp_path, capsys):
    (tmp_path / "camp.yaml").write_text(SPEC)
    (tmp_path / "campaign.yaml").write_text(CAMPAIGN + "  - spec: camp.yaml\n    name: broken\n"
                                            "    set: {finetune.epochs: -1}\n")
    out = tmp_path / "out"
    assert main([str(tmp_path / "campaign.yaml"), "--output", str(out)]) == 2
    assert "campaign study 'broken'" in capsys.readouterr().err and not out.exists()


def test_axes_and_compute_matched_expand_into_studies(tmp_path):
    from sptune.spec.campaign import expand

    studies = expand({"campaign": "c", "studies": [{
        "spec": "s.yaml", "name": "b", "set": {"seed": 3},
        "axes": {"model.n_layers": [1, 2]},
        "compute_matched": {"total_epochs": 20, "spt_fractions": [0, 0.25]},
    }]}, tmp_path / "campaign.yaml")
    assert [s.name for s in studies] == ["b-n_layers1-spt0-ft20", "b-n_layers1-spt5-ft15",
                                         "b-n_layers2-spt0-ft20", "b-n_layers2-spt5-ft15"]
    assert studies[1].overrides == ("seed=3", "model.n_layers=1", "pretrain.epochs=5", "finetune.epochs=15",
                                    "budget=total_matched")
    assert all(s.spec_path == tmp_path / "s.yaml" for s in studies)


def test_compute_matched_gives_scratch_the_whole_budget(repo_root, tmp_path):
    from sptune.spec import load_spec
    from sptune.spec.campaign import expand

    spec_path = f"{repo_root}/search_spaces/digits_quick.yaml"
    studies = expand({"campaign": "c", "studies": [{
        "spec": spec_path, "compute_matched": {"total_epochs": 20, "spt_fractions": [0, 0.25, 0.5]}}]},
        tmp_path / "campaign.yaml")
    for study, spt_epochs in zip(studies, (0, 5, 10), strict=True):
        spec = load_spec(study.spec_path, list(study.overrides))
        assert variant_budget(spec, "scratch").max_iterations == 20  # every study: scratch trains all T epochs
        assert spec.pretrain_budget().amount + variant_budget(spec, "spt").max_iterations == 20
        assert spec.pretrain_budget().amount == spt_epochs


def test_data_fractions_are_nested():
    from sptune.tasks import TaskRequest, load_task

    small = load_task(TaskRequest("digits", {"train_fraction": 0.25}))
    large = load_task(TaskRequest("digits", {"train_fraction": 0.5}))
    rows = {r.tobytes() for r in large.train.x}
    assert len(small.train) == round(0.25 * 1258) and len(large.train) == round(0.5 * 1258)
    assert all(r.tobytes() in rows for r in small.train.x)
    assert (small.val.x == large.val.x).all()  # validation never shrinks


def test_zero_spt_epochs_is_planned_without_a_tuner(repo_root, capsys):
    from sptune.sweep import main

    spec = f"{repo_root}/search_spaces/digits_quick.yaml"
    assert main([spec, "--set", "pretrain.epochs=0", "--dry-run"]) == 0
    assert "0 epochs: SPT variants start from an untrained" in capsys.readouterr().out


def test_a_relative_output_dir_reaches_trials_as_an_absolute_path(ray_session, repo_root, tmp_path, monkeypatch):
    """Trials run in their own working directories: with `--output runs/x` they could not open the
    untrained encoder a 0-SPT-epoch study writes there (sweeps/pathfinder32_budget.yaml failed so)."""
    from sptune.preflight import RunOptions, prepare

    monkeypatch.chdir(tmp_path)
    spec = Path(repo_root) / "search_spaces" / "digits_quick.yaml"
    ready = prepare(RunOptions(spec, ("pretrain.epochs=0",), output=Path("runs/relative")))
    assert ready.output_dir == tmp_path / "runs" / "relative"
