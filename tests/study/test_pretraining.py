"""SPT checkpoints known without trials: per re-run seed (rerun_pretrain) read back from
study_state.json on --resume; 0 SPT epochs give an untrained encoder seeded per seed; anything
else is a stage of the study's one Tuner (None)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from sptune.judging.selection import Selection
from sptune.plan.study_plan import build_plan
from sptune.spec import load_spec
from sptune.study.pretraining import PretrainedWithoutTrials
from sptune.study.state import SearchRecord, SelectedTrial, StateFile
from sptune.tasks.base import TaskInfo

RERUN_PRETRAIN = ["rerun_seeds=2", "rerun_pretrain=true", "model.n_layers=1"]
DIGITS = TaskInfo("digits", "continuous", 64, 10, levels=17)


def _plan(repo_root: str, *overrides: str):
    spec = load_spec(Path(repo_root) / "search_spaces" / "digits_quick.yaml", [*RERUN_PRETRAIN, *overrides])
    return build_plan(spec, DIGITS, cluster_cpus=2)


def _picked(trial_id: str, seed: int) -> SelectedTrial:
    sel = Selection(trial_id=trial_id, config={"lr": 1e-3, "batch_size": 32, "seed": seed, "objective": "masked"},
                    checkpoint_path=f"/ckpt/{trial_id}", metric="val_loss", score=0.1, epoch=2, metrics={},
                    n_trials=1, n_diverged=0, n_failed=0, trial_epochs=2)
    return SelectedTrial(sel, None)


def _checkpoints(plan, out: Path) -> PretrainedWithoutTrials:
    # No data (its task's shape only): a Tuner could not run.
    return PretrainedWithoutTrials(plan, SimpleNamespace(info=DIGITS), out, StateFile(out), cache_dir=None)


def test_finished_re_pretrainings_are_read_back_on_resume(repo_root, tmp_path):
    plan = _plan(repo_root)
    state_file = StateFile(tmp_path)
    state_file.state.searches["pretrain"] = SearchRecord([_picked("p", 0)])
    state_file.state.searches["pretrain-rerun"] = SearchRecord([_picked("a", 1000), _picked("b", 1001)])
    state_file.save()
    spt = _checkpoints(plan, tmp_path)
    assert spt.given_per_seed(plan.pretrainings()[0]) == {1000: "/ckpt/a", 1001: "/ckpt/b"}
    assert spt.given(plan.pretrainings()[0]) == "/ckpt/p"


def test_pretrainings_still_to_select_are_stages(repo_root, tmp_path):
    plan = _plan(repo_root)
    spt = _checkpoints(plan, tmp_path)
    assert spt.given(plan.pretrainings()[0]) is None and spt.given_per_seed(plan.pretrainings()[0]) is None


def test_zero_spt_epochs_give_an_untrained_encoder_per_seed(repo_root, tmp_path):
    plan = _plan(repo_root, "pretrain.epochs=0")
    found = _checkpoints(plan, tmp_path).given_per_seed(plan.pretrainings()[0])
    assert sorted(found) == [1000, 1001]
    first, second = (Path(found[seed]) / "state.pt" for seed in (1000, 1001))
    assert first.read_bytes() != second.read_bytes()
