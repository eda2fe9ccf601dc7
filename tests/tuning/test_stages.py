"""The study's one Tuner (sptune.tuning.stages), without starting Ray: the staged searcher releases a stage
only once what it needs is selected, hands its trials the selection's consequences (the SPT
checkpoint, the selected config per re-run seed), keeps every stage's own budget and searcher,
selects on validation only, and survives a save/restore in the middle."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
from ray.tune.search import Searcher

from sptune.judging.ledger import StageFailed
from sptune.judging.selection import TrialOutcome
from sptune.judging.stage_graph import Stage
from sptune.plan.study_plan import build_plan
from sptune.spec import load_spec
from sptune.tasks.base import TaskInfo
from sptune.tuning.stages import StagedSearcher
from sptune.tuning.tuner import staged_search
from tests.helpers_tiny import PLAIN_PICK

DIGITS = TaskInfo("digits", "continuous", 64, 10, levels=17)
SMALL = ["pretrain.num_samples=3", "variants.scratch.num_samples=3", "variants.spt.num_samples=4",
         "rerun_seeds=2", "scheduler.type=fifo", "searcher.type=random"]


def _plan(repo_root: str, *overrides: str):
    spec = load_spec(Path(repo_root) / "search_spaces" / "digits_quick.yaml", [*SMALL, *overrides])
    return build_plan(spec, DIGITS, cluster_cpus=2)


def _stages(plan) -> list[Stage]:
    """The stages a fresh study runs (as Study._stages builds them, without rerun_pretrain)."""
    seeds = tuple(plan.rerun_seeds())
    stages = [Stage(p) for p in plan.pretrainings()]
    for search in plan.variant_searches():
        stages += [Stage(search, spt_from=search.init_from), Stage.rerun(search, seeds, search.init_from)]
    return stages


def _outcome(trial_id: str, index: int, config: dict, score: float, diverged: bool = False) -> TrialOutcome:
    """An ended trial: val_acc = score (finetuning), val_loss = 1 - score (pretraining); the test
    split's number is deliberately the opposite, so selecting on it would pick another trial."""
    epoch = {"val_acc": score, "val_loss": 1 - score, "test_acc": 1 - score, "epoch": 2}
    metrics = {"trial_id": trial_id, "experiment_tag": f"{index}_x", "training_iteration": 2, "diverged": diverged}
    kept = [] if diverged else [(SimpleNamespace(path=f"/ckpt/{trial_id}"), epoch)]
    return TrialOutcome(config, metrics, None, f"/trials/{trial_id}", kept)


class Driver:
    """What Tune does with the searcher: ask, run, tell; trials end in the order asked."""

    def __init__(self, searcher: StagedSearcher, scores) -> None:
        self.searcher, self.scores, self.configs, self.n = searcher, scores, {}, 0
        self.ended_before: dict[str, set[str]] = {}  # trial -> stages already selected when it was suggested

    def ask(self) -> str | None:
        trial_id = f"t{self.n:03d}"
        config = self.searcher.suggest(trial_id)
        if config == Searcher.FINISHED:
            return Searcher.FINISHED
        if config is None:
            return None
        self.configs[trial_id], self.n = config, self.n + 1
        self.ended_before[trial_id] = set(self.searcher.ledger.selected)
        return trial_id

    def end(self, trial_id: str) -> None:
        config = self.configs[trial_id]
        score, diverged = self.scores(config, trial_id)
        told = {**config, "done": True, "best_val_acc": score, "best_val_loss": 1 - score}
        self.searcher.on_trial_complete(trial_id, told)
        self.searcher.ledger.trial_ended(trial_id, _outcome(trial_id, int(trial_id[1:]), config, score, diverged))

    def run(self, concurrent: int = 2, stop_after: int | None = None) -> None:
        live: list[str] = []
        while stop_after is None or self.n < stop_after:
            asked = self.ask() if len(live) < concurrent else None
            if asked == Searcher.FINISHED:
                break
            if asked is not None:
                live.append(asked)
                continue
            assert live, "the searcher waits, but no trial is running: the study would hang"
            self.end(live.pop(0))
        for trial_id in live:
            self.end(trial_id)


def _score(config: dict, trial_id: str) -> tuple[float, bool]:
    return float(config["lr"]) * 10, False  # the highest LR wins every search


@pytest.fixture
def plan(repo_root):
    return _plan(repo_root)


def test_every_stage_gets_its_own_budget_and_dependents_wait_for_selections(plan):
    searcher, _ = staged_search(plan, _stages(plan), {}, {})
    driver = Driver(searcher, _score)
    driver.run()
    per_stage = Counter(c["stage"] for c in driver.configs.values())
    assert per_stage == {"pretrain": 3, "search-scratch": 3, "search-spt": 4, "rerun-scratch": 2, "rerun-spt": 2}
    assert set(searcher.ledger.selected) == set(per_stage) and not searcher.ledger.failed
    for trial_id, config in driver.configs.items():
        needs = {"search-spt": {"pretrain"}, "rerun-scratch": {"search-scratch"}, "rerun-spt": {"search-spt"}}
        assert needs.get(config["stage"], set()) <= driver.ended_before[trial_id]


def test_spt_trials_carry_the_selected_checkpoint_and_reruns_the_selected_config(plan):
    searcher, _ = staged_search(plan, _stages(plan), {}, {})
    driver = Driver(searcher, _score)
    driver.run()
    by_stage = {}
    for trial_id, config in driver.configs.items():
        by_stage.setdefault(config["stage"], []).append((trial_id, config))
    best_pretrain = max(by_stage["pretrain"], key=lambda tc: tc[1]["lr"])[0]  # the lowest val_loss
    assert searcher.ledger.selected["pretrain"][0].checkpoint_path == f"/ckpt/{best_pretrain}"
    assert all(c["spt_checkpoint"] == f"/ckpt/{best_pretrain}" for _, c in by_stage["search-spt"])
    assert all("spt_checkpoint" not in c for _, c in by_stage["search-scratch"] + by_stage["rerun-scratch"])
    for variant in ("scratch", "spt"):
        best = max(by_stage[f"search-{variant}"], key=lambda tc: tc[1]["lr"])[1]
        reruns = [c for _, c in by_stage[f"rerun-{variant}"]]
        assert [c["seed"] for c in reruns] == plan.rerun_seeds()
        assert all((c["lr"], c["batch_size"], c["phase"]) == (best["lr"], best["batch_size"], "rerun") for c in reruns)
        assert {s.config["seed"] for s in searcher.ledger.selected[f"rerun-{variant}"]} == set(plan.rerun_seeds())
    assert all(c["spt_checkpoint"] == f"/ckpt/{best_pretrain}" for _, c in by_stage["rerun-spt"])
    # Validation only: the test number (the opposite ranking) never decides.
    best_scratch = max(float(c["lr"]) * 10 for _, c in by_stage["search-scratch"])
    assert searcher.ledger.selected["search-scratch"][0].score == best_scratch


def test_a_failed_pretraining_blocks_only_what_needs_it(plan):
    def diverge_pretraining(config: dict, trial_id: str) -> tuple[float, bool]:
        return 0.5, "objective" in config

    searcher, _ = staged_search(plan, _stages(plan), {}, {})
    driver = Driver(searcher, diverge_pretraining)
    driver.run()  # ends with FINISHED, not waiting forever for search-spt
    stages = {c["stage"] for c in driver.configs.values()}
    assert stages == {"pretrain", "search-scratch", "rerun-scratch"}
    assert set(searcher.ledger.failed) == {"pretrain"} and "diverged" in searcher.ledger.failed["pretrain"][1]


def test_given_checkpoints_release_spt_trials_at_once(plan):
    stages = [s for s in _stages(plan) if s.label != "pretrain"]
    searcher, _ = staged_search(plan, stages, {"pretrain": {None: "/given"}}, {})
    driver = Driver(searcher, _score)
    assert [driver.ask() for _ in range(2)] == ["t000", "t001"]
    assert {c["stage"] for c in driver.configs.values()} == {"search-spt", "search-scratch"}
    for trial_id in ("t000", "t001"):
        driver.end(trial_id)
    driver.run()
    assert all(c["spt_checkpoint"] == "/given" for c in driver.configs.values() if c["variant"] == "spt")


def test_a_stage_waiting_for_a_trial_tune_does_not_have_fails_instead_of_hanging(plan):
    """A searcher restored from a newer snapshot than Tune's trial list waits for a trial Tune never
    runs (Tune ended it, or never had it, and the driver never saw its outcome): it must stop the study."""
    searcher, _ = staged_search(plan, _stages(plan), {}, {})
    driver = Driver(searcher, _score)
    asked = [driver.ask() for _ in range(3)]  # the pretraining's 3 trials (2 concurrent is Tune's business)
    assert {driver.configs[t]["stage"] for t in asked} == {"pretrain"}
    for trial_id in asked[:2]:
        driver.end(trial_id)
    searcher.on_trial_complete(asked[2], None)  # Tune is done with it; its outcome never reaches the driver
    while (found := driver.ask()) not in (None, Searcher.FINISHED):  # the searches that need nothing
        driver.end(found)
    assert found == Searcher.FINISHED
    assert "pretrain" in searcher.ledger.failed and "stalled" in searcher.ledger.failed["pretrain"][1]
    failed = {e.label for e in searcher.ledger.take_events() if isinstance(e, StageFailed)}
    assert {"search-spt", "rerun-spt"} <= set(searcher.ledger.failed) and "pretrain" in failed


def test_the_searcher_continues_after_save_and_restore(plan, tmp_path):
    searcher, _ = staged_search(plan, _stages(plan), {}, {})
    driver = Driver(searcher, _score)
    driver.run(stop_after=5)  # pretraining selected, searches under way
    searcher.save(str(tmp_path / "searcher.pkl"))
    restored, _ = staged_search(plan, _stages(plan), {}, {})
    restored.restore(str(tmp_path / "searcher.pkl"))
    assert restored.ledger.selected.keys() == searcher.ledger.selected.keys()
    assert restored.searchers.keys() == searcher.searchers.keys()
    driver.searcher = restored
    driver.run()
    assert Counter(c["stage"] for c in driver.configs.values())["search-spt"] == 4
    assert set(restored.ledger.selected) == {"pretrain", "search-scratch", "search-spt", "rerun-scratch", "rerun-spt"}


def test_the_schedulers_decisions_are_saved_beside_the_ledger(repo_root, tmp_path):
    """The searcher's snapshot carries the stages' scheduler decisions, and its restore loads them into the scheduler
    that Tuner.restore unpickles with it from tuner.pkl (one pickle: the same object)."""
    import pickle

    from tests.helpers_tune import Controller, stub_trial

    plan = _plan(repo_root, "scheduler.type=sha")
    searcher, scheduler = staged_search(plan, _stages(plan), {}, {})
    pickled = pickle.dumps((searcher, scheduler))  # as tuner.pkl holds them, before any trial
    controller = Controller(scheduler)
    trial = stub_trial(1, "pretrain")
    controller.add(trial)
    controller.start_chosen()
    scheduler.on_trial_result(controller, trial, {"training_iteration": 1, "best_val_loss": 0.5})
    searcher.save(str(tmp_path / "searcher.pkl"))
    restored, restored_scheduler = pickle.loads(pickled)
    assert restored.decisions is restored_scheduler and restored_scheduler.state()["pretrain"]["trials"] == {}
    restored.restore(str(tmp_path / "searcher.pkl"))
    assert restored_scheduler.state() == scheduler.state()
    assert "t1" in restored_scheduler.state()["pretrain"]["trials"]


def _study_stages(plan, out: Path):
    """Study._stages without a tracker or Ray: which searches the one Tuner runs, and what they wait for."""
    from sptune.study.pretraining import PretrainedWithoutTrials
    from sptune.study.state import StateFile
    from sptune.study.study import Study

    study = Study.__new__(Study)
    study.plan, study.state_file = plan, StateFile(out)
    study.pretrained = PretrainedWithoutTrials(plan, SimpleNamespace(info=DIGITS), out, study.state_file, None)
    stages, checkpoints = study._stages()
    return {s.label: s.needs for s in stages}, checkpoints


def test_rerun_pretrain_stages_wait_for_the_seeds_own_pretraining(repo_root, tmp_path):
    needs, checkpoints = _study_stages(_plan(repo_root, "rerun_pretrain=true", *PLAIN_PICK), tmp_path)
    assert needs == {
        "pretrain": (), "pretrain-rerun": ("pretrain",),
        "search-scratch": (), "rerun-scratch": ("search-scratch",),
        "search-spt": ("pretrain",), "rerun-spt": ("search-spt", "pretrain-rerun"),
    }
    assert checkpoints == {}


def test_a_variants_pick_goes_through_its_lr_extension_and_candidates_before_its_reruns(repo_root, tmp_path):
    """digits_quick's own chain: each variant's search, 2 LR extension rounds, candidates, re-runs; every stage
    after the search also waits for what its SPT variant starts from."""
    needs, _ = _study_stages(_plan(repo_root, "rerun_pretrain=true"), tmp_path)
    assert needs == {
        "pretrain": (), "pretrain-rerun": ("pretrain",),
        "search-scratch": (), "extend-scratch-1": ("search-scratch",), "extend-scratch-2": ("extend-scratch-1",),
        "candidates-scratch": ("extend-scratch-2",), "rerun-scratch": ("candidates-scratch",),
        "search-spt": ("pretrain",), "extend-spt-1": ("search-spt", "pretrain"),
        "extend-spt-2": ("extend-spt-1", "pretrain"), "candidates-spt": ("extend-spt-2", "pretrain"),
        "rerun-spt": ("candidates-spt", "pretrain-rerun"),
    }


def test_zero_spt_epochs_need_no_pretraining_stage(repo_root, tmp_path):
    needs, checkpoints = _study_stages(_plan(repo_root, "rerun_pretrain=true", "pretrain.epochs=0"), tmp_path)
    assert "pretrain" not in needs and "pretrain-rerun" not in needs
    assert set(checkpoints) == {"pretrain", "pretrain-rerun"} and sorted(checkpoints["pretrain-rerun"]) == [1000, 1001]
    assert needs["search-spt"] == ("pretrain",)  # satisfied at once by the untrained encoder


def test_each_search_gets_its_own_searchers_proposals_whatever_else_runs(repo_root):
    """Optuna (batched) inside the one Tuner proposes, for each variant, exactly what that variant's
    searcher proposes alone: other stages running beside it change nothing."""
    from sptune.tuning.searchers import searcher_for

    plan = _plan(repo_root, "searcher.type=optuna", "variants.scratch.num_samples=7", "variants.spt.num_samples=6")
    searcher, _ = staged_search(plan, _stages(plan), {}, {})
    driver = Driver(searcher, _score)
    driver.run(concurrent=3)
    for search in plan.variant_searches():
        alone, proposed = searcher_for(plan, search), []
        while (config := alone.suggest(f"a{len(proposed)}")) not in (None, Searcher.FINISHED):
            proposed.append(config)
            if len(proposed) % plan.spec.searcher.batch_size == 0 or len(proposed) == search.n_trials:
                for i in range(len(proposed) - len(alone.batch), len(proposed)):
                    alone.on_trial_complete(f"a{i}", {**proposed[i], "best_val_acc": _score(proposed[i], "")[0]})
        mine = [c for c in driver.configs.values() if c["stage"] == search.label]
        assert [(c["lr"], c["batch_size"]) for c in mine] == [(c["lr"], c["batch_size"]) for c in proposed]
