"""No two trainings of a study are the same config with the same seed: grid repeats get their own
seeds, and re-runs use seeds no search trial used (the search winner is never replayed). Checked on
the configs the study's staged searcher hands out (`sptune.tuning.tuner.staged_search`), without starting Ray."""

from __future__ import annotations

from pathlib import Path

from ray.tune.search import Searcher

from sptune.judging.selection import Selection
from sptune.judging.stage_graph import Stage
from sptune.plan.study_plan import build_plan
from sptune.rules import seeds
from sptune.spec import apply_override, from_dict, read_yaml
from sptune.tasks.base import TaskInfo
from sptune.tuning.tuner import staged_search

BASE = Path(__file__).resolve().parents[2] / "search_spaces" / "digits_quick.yaml"
LR_GRID = "{type: grid, values: [3.0e-4, 1.0e-3, 3.0e-3]}"


def _plan(*overrides: str):
    """Two scratch-kind variants: a pure 3-point LR grid, and the same grid with batch drawn from a choice."""
    data = read_yaml(BASE)
    for assignment in ("pretrain=null", "variants.spt=null", "rerun_seeds=3", *overrides):
        apply_override(data, assignment)
    data["variants"] = {k: v for k, v in data["variants"].items() if v is not None}
    data["variants"]["drawn"] = {"kind": "scratch", "search": {}}
    for variant, batch in (("scratch", "{type: grid, values: [32]}"), ("drawn", "{type: choice, values: [32, 64]}")):
        for assignment in (f"search.lr={LR_GRID}", f"search.batch_size={batch}", "num_samples=null"):
            apply_override(data, f"variants.{variant}.{assignment}")
    return build_plan(from_dict(data), TaskInfo("digits", "continuous", 64, 10, levels=17), cluster_cpus=2)


def _handed_out(plan, stages: list[Stage], selections: dict | None = None, checkpoints: dict | None = None) -> list:
    """Every config the study's staged searcher suggests for `stages`, until it says it is finished."""
    searcher, _ = staged_search(plan, stages, checkpoints or {}, selections or {})
    configs = []
    while (config := searcher.suggest(f"t{len(configs)}")) not in (Searcher.FINISHED, None):
        configs.append(config)
    assert len(configs) == sum(s.budget for s in stages)
    return configs


def _training(config: dict) -> tuple:
    """What makes two trials the same training: variant, phase-independent config and seed."""
    return config["variant"], config["lr"], config["batch_size"], config["seed"]


def _winner(config: dict) -> Selection:
    return Selection(trial_id="t0", config=config, checkpoint_path="/ckpt", metric="val_acc", score=0.9, epoch=2,
                     metrics={}, n_trials=3, n_diverged=0, n_failed=0, trial_epochs=6)


def test_grid_repeats_hand_out_no_identical_training():
    plan = _plan("finetune.grid_repeats=3")
    configs = _handed_out(plan, [Stage(s) for s in plan.variant_searches()])
    trainings = [_training(c) for c in configs]
    assert len(trainings) == len(set(trainings)) == 2 * 3 * 3
    for variant in ("scratch", "drawn"):
        mine = [c for c in configs if c["variant"] == variant]
        for lr in (3.0e-4, 1.0e-3, 3.0e-3):  # each grid point: 3 repeats, 3 distinct seeds
            assert sorted(c["seed"] for c in mine if c["lr"] == lr) == [0, 1, 2]


def test_reruns_use_seeds_the_search_never_used():
    plan = _plan()
    searches = plan.variant_searches()
    configs = _handed_out(plan, [Stage(s) for s in searches])
    winners = {s.label: [_winner(next(c for c in configs if c["variant"] == s.variant))] for s in searches}
    rerun_configs = _handed_out(plan, [Stage.rerun(s, tuple(plan.rerun_seeds())) for s in searches], winners)
    assert not {_training(c) for c in rerun_configs} & {_training(c) for c in configs}  # the winner never replayed
    assert {c["seed"] for c in rerun_configs} == {1000, 1001, 1002}
    assert not {c["seed"] for c in rerun_configs} & {c["seed"] for c in configs}
    assert plan.rerun_seeds() == [1000, 1001, 1002] and plan.search_seeds() == [0]


def test_a_rerun_names_the_spt_checkpoint_of_its_own_seed():
    plan = _plan()
    search = plan.variant_searches()[0]
    per_seed = {1000: "/spt/a", 1001: "/spt/b", 1002: "/spt/c"}
    winner = {search.label: [_winner({"lr": 1e-3, "batch_size": 32, "seed": 0})]}
    rerun = Stage.rerun(search, tuple(plan.rerun_seeds()), spt_from="pretrain-rerun")
    configs = _handed_out(plan, [rerun], winner, {"pretrain-rerun": per_seed})
    assert [(c["seed"], c["spt_checkpoint"]) for c in configs] == sorted(per_seed.items())


def test_rerun_seeds_stay_clear_of_every_possible_grid_repeat():
    highest_search_seed = seeds.search_seeds(5, seeds.MAX_GRID_REPEATS)[-1]
    assert highest_search_seed < seeds.rerun_seeds(5, 1)[0]
