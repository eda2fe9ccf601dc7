"""The plan: how many distinct trainings each search runs, with which seeds, and only true claims."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from sptune.plan.dry_run_text import describe
from sptune.plan.study_plan import build_plan
from sptune.spec import SweepSpec, apply_override, from_dict, load_spec, read_yaml
from sptune.tasks.base import TaskInfo
from tests.helpers_tiny import PLAIN_PICK

BASE = Path(__file__).resolve().parents[2] / "search_spaces" / "digits_quick.yaml"
LR_GRID = "{type: grid, values: [3.0e-4, 1.0e-3, 3.0e-3]}"
ONE_BATCH = "{type: grid, values: [32]}"


def _spec(*overrides: str) -> SweepSpec:
    """digits_quick with both variants searching a 3-point LR grid (batch a one-value grid)."""
    data = read_yaml(BASE)
    for variant in ("scratch", "spt"):
        for assignment in (f"search.lr={LR_GRID}", f"search.batch_size={ONE_BATCH}", "num_samples=null"):
            apply_override(data, f"variants.{variant}.{assignment}")
    for assignment in (*PLAIN_PICK, *overrides):  # these count a plain study's trials
        apply_override(data, assignment)
    return from_dict(data)


def _plan(*overrides: str):
    return build_plan(_spec(*overrides), TaskInfo("digits", "continuous", 64, 10, levels=17), cluster_cpus=2)


def test_a_pure_grid_runs_each_point_once_by_default():
    plan = _plan("rerun_seeds=1")
    assert [s.n_trials for s in plan.variant_searches()] == [3, 3]  # not 3 points x num_samples 4 = 12
    assert plan.search_seeds() == [0]
    text = describe(plan)
    assert "3 grid points x 1 seed (0) = 3 trials" in text
    pretraining = plan.pretrainings()[0].n_trials
    assert f"Total: {pretraining + 6} trials = {pretraining + 6} distinct trainings" in text


def test_grid_repeats_give_each_repeat_its_own_seed():
    plan = _plan("rerun_seeds=1", "finetune.grid_repeats=2")
    assert [s.n_trials for s in plan.variant_searches()] == [6, 6]
    assert plan.search_seeds() == [0, 1]  # 2 distinct seeds per grid point
    assert "3 grid points x 2 seeds (0–1) = 6 trials" in describe(plan)


def test_a_variant_may_ask_for_its_own_repeats():
    plan = _plan("variants.spt.grid_repeats=3")
    assert {s.variant: s.n_trials for s in plan.variant_searches()} == {"scratch": 3, "spt": 9}


def test_fifo_claims_no_early_stopping():
    text = describe(_plan("scheduler.type=fifo"))
    assert "ASHA" not in text and "early stopping ends" not in text and "early stopping)" not in text
    assert "early stopping ends weak search trials sooner" in describe(_plan())


def test_the_plan_names_rerun_seeds_the_search_never_used():
    text = describe(_plan("rerun_seeds=3"))
    assert "seeds 1000–1002 (none used by the search: seeds 0)" in text
    assert "Spread over finetuning seeds only" in text


def test_rerun_pretrain_is_planned_and_counted():
    plan = _plan("rerun_seeds=2", "rerun_pretrain=true", "scheduler.type=fifo")
    text = describe(plan)
    assert "pretrain-rerun: the selected pretraining config re-pretrained with seeds 1000–1001: 2 trials" in text
    assert "Spread over pretraining + finetuning seeds" in text
    pretraining = plan.pretrainings()[0].n_trials
    total = pretraining + 3 + 3 + 2 + 2 * 2  # pretraining, 2 grid searches, 2 re-pretrainings, 2 x 2 re-runs
    assert f"Total: {total} trials = {total} distinct trainings" in text
    assert plan.spread() == "pretrain+finetune"


def test_a_cross_task_pretrainings_reruns_train_on_its_source_task():
    spec = _spec("rerun_seeds=2", "rerun_pretrain=true",
                 f"variants.cross={{kind: spt_cross, source_task: {{name: listops}}, search: {{lr: {LR_GRID}, "
                 f"batch_size: {ONE_BATCH}}}}}")
    plan = build_plan(spec, TaskInfo("digits", "continuous", 64, 10, levels=17), cluster_cpus=2,
                      source_data={"pretrain-on-listops": "listops data"})
    cross = next(p for p in plan.pretrainings() if p.pretrain_source.task is not None)
    rerun = replace(cross, phase="rerun", fixed_configs=({"lr": 1e-3, "batch_size": 32, "seed": 1000},))
    assert rerun.label == "pretrain-on-listops-rerun"
    assert plan.training_data(rerun, "digits data") == plan.training_data(cross, "digits data") == "listops data"
    assert plan.training_data(plan.variant_searches()[0], "digits data") == "digits data"


DIGITS = TaskInfo("digits", "continuous", 64, 10, levels=17)


def _describe(repo_root: str, *overrides: str) -> str:
    spec = load_spec(Path(repo_root) / "search_spaces" / "digits_quick.yaml", list(overrides))
    return describe(build_plan(spec, DIGITS, cluster_cpus=2))


def test_the_plan_warns_when_early_stopping_decides_during_the_warm_up(repo_root):
    assert "Note: the first early-stopping rung" not in _describe(repo_root)
    warned = _describe(repo_root, "training.warmup_fraction=0.3")  # warm-up to epoch 6, first rung at 5
    assert "Note: the first early-stopping rung (epoch 5) comes before the LR warm-up ends" in warned
    assert "Note:" not in _describe(repo_root, "training.warmup_fraction=0.3", "scheduler.type=fifo")


def test_the_warm_up_note_counts_a_warm_up_in_steps_over_the_training_rows(repo_root):
    spec = load_spec(Path(repo_root) / "search_spaces" / "digits_quick.yaml",
                     ["training.warmup_steps=300", "pretrain.warmup_steps=30"])
    # 1,000 rows at the largest batch, 64: 16 steps an epoch, so 300 warm-up steps end in epoch 18.75, after the
    # rung at 5; pretraining's own 30 steps end before it
    text = describe(build_plan(spec, DIGITS, cluster_cpus=2, train_rows=1000))
    assert "comes before the LR warm-up ends (epoch 18.8 of 20 in search-scratch)" in text
    short = load_spec(Path(repo_root) / "search_spaces" / "digits_quick.yaml", ["training.warmup_steps=60"])
    assert "Note:" not in describe(build_plan(short, DIGITS, cluster_cpus=2, train_rows=1000))


def test_the_plan_states_the_one_ranking(repo_root):
    text = _describe(repo_root)
    assert "rank best_val_acc (max)" in text and "rank best_val_loss (min)" in text
    assert "ties: higher val_acc, then lower val_loss, then the earlier epoch" in text


def _shipped(name: str) -> tuple[dict, str]:
    """A shipped spec's YAML as written, and its plan's text on its task's shapes."""
    path = BASE.parent / name
    spec = load_spec(path)
    info = {"digits": TaskInfo("digits", "continuous", 64, 10, levels=17),
            "image": TaskInfo("image", "continuous", 1024, 10, levels=256)}[spec.task.name]
    return read_yaml(path), describe(build_plan(spec, info, cluster_cpus=2))


def test_the_headline_spec_tests_3_seeds_and_ranks_trials_after_the_lr_warm_up():
    written, text = _shipped("cifar_lr.yaml")
    assert written["rerun_seeds"] >= 3
    assert "Note:" not in text  # e.g. the first rung before the LR warm-up ends


def test_the_main_job_states_its_fairness_settings_in_its_own_file():
    """Written in digits_quick.yaml, not left to defaults a reader cannot see."""
    written, text = _shipped("digits_quick.yaml")
    assert written["budget"] in ("finetune_matched", "total_matched")
    assert written["selection"]["top_k"] >= 2 and written["selection"]["seeds"] >= 2
    assert all(v["search"]["lr"].get("extend") is True for v in written["variants"].values())
    assert f"Budget: {written['budget']}" in text and "candidates:" in text and "Note:" not in text

