"""Several stages in one Tuner: each keeps its own searcher, budget and early stopping."""

from __future__ import annotations

from pathlib import Path

from ray import tune
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler
from ray.tune.search import Searcher
from ray.tune.search.optuna import OptunaSearch

from sptune.judging.ledger import Ledger
from sptune.judging.stage_graph import Stage
from sptune.plan.study_plan import build_plan
from sptune.spec import load_spec
from sptune.tasks.base import TaskInfo
from sptune.tuning.schedulers.by_stage import StageScheduler
from sptune.tuning.searchers import FixedConfigs, RandomConfigs, grid_configs
from sptune.tuning.stages import StagedSearcher

SPACE = {"lr": tune.loguniform(1e-4, 1e-2)}
SPEC = Path(__file__).resolve().parents[3] / "search_spaces" / "digits_quick.yaml"
DIGITS = TaskInfo("digits", "continuous", 64, 10, levels=17)


def _stages(budgets: dict[str, int]) -> list[Stage]:
    """A search stage per variant with the given trial budgets (num_samples), released at once."""
    edits = ["pretrain.epochs=0", *(f"variants.{v}.num_samples={n}" for v, n in budgets.items())]
    plan = build_plan(load_spec(SPEC, edits), DIGITS, cluster_cpus=2)
    return [Stage(s) for s in plan.variant_searches() if s.variant in budgets]


def _staged(parts: dict[str, Searcher], budgets: dict[str, int]) -> StagedSearcher:
    """A StagedSearcher over `_stages(budgets)`, each stage asking its variant's searcher in `parts`."""
    stages = _stages(budgets)
    fixed = {s.label: {"phase": "search", "variant": s.search.variant, "seed": 0, "stage": s.label} for s in stages}
    return StagedSearcher(Ledger(stages, {}, {}), {s.label: parts[s.search.variant] for s in stages}, fixed)


def _searcher(budgets: dict[str, int]) -> StagedSearcher:
    parts = {
        "scratch": OptunaSearch(OptunaSearch.convert_search_space(SPACE), metric="val_acc", mode="max", seed=0),
        "spt": FixedConfigs([{"lr": 1e-3}, {"lr": 2e-3}, {"lr": 3e-3}]),
    }
    return _staged(parts, budgets)


def test_round_robin_within_each_variants_own_budget():
    searcher = _searcher({"scratch": 2, "spt": 3})
    configs = [searcher.suggest(f"t{i}") for i in range(6)]
    assert [c["variant"] for c in configs[:5]] == ["scratch", "spt", "scratch", "spt", "spt"]
    assert configs[5] == Searcher.FINISHED
    assert [c["lr"] for c in configs[:5] if c["variant"] == "spt"] == [1e-3, 2e-3, 3e-3]
    assert all(c["phase"] == "search" and c["seed"] == 0 for c in configs[:5])


def test_results_reach_only_the_searcher_that_proposed_the_trial():
    searcher = _searcher({"scratch": 3, "spt": 1})
    first = searcher.suggest("a")
    searcher.suggest("b")  # spt
    searcher.on_trial_complete("a", {"val_acc": 0.9, **first})
    optuna = searcher.searchers["search-scratch"]
    completed = [t for t in optuna._ot_study.trials if t.state.name == "COMPLETE"]
    assert [t.value for t in completed] == [0.9]


def _report(searcher: Searcher, trial_id: str, config: dict) -> None:
    # Tune reports every finished trial (and every failed one) to the searcher that proposed it.
    searcher.on_trial_complete(trial_id, {"val_acc": 0.99, **config}, error=False)
    searcher.on_trial_complete(trial_id + "-failed", None, error=True)


def test_fixed_configs_hand_out_the_list_in_order_whatever_the_results():
    given = [{"lr": 1e-3}, {"lr": 2e-3}]
    searcher = FixedConfigs(given)
    first = searcher.suggest("t")
    _report(searcher, "t", first)
    first["lr"] = 0.5  # a trial changing its config must not change the list
    assert [searcher.suggest("u"), searcher.suggest("v")] == [{"lr": 2e-3}, Searcher.FINISHED]
    assert searcher.configs == given


def test_random_configs_draw_the_same_stream_whatever_the_results():
    told, untold = RandomConfigs(dict(SPACE), 0), RandomConfigs(dict(SPACE), 0)
    draws = []
    for i in range(3):
        config = told.suggest(f"t{i}")
        _report(told, f"t{i}", config)
        draws.append(config)
    assert draws == [untold.suggest(f"t{i}") for i in range(3)]
    assert len({c["lr"] for c in draws}) == 3  # independent draws, not one value repeated


def test_a_given_config_keeps_its_own_seed():
    searcher = _staged({"spt": FixedConfigs([{"lr": 1e-3, "seed": 7}])}, {"spt": 1})
    assert searcher.suggest("x")["seed"] == 7


def test_state_survives_save_and_restore(tmp_path):
    searcher = _searcher({"scratch": 2, "spt": 3})
    before = [searcher.suggest(f"t{i}") for i in range(3)]
    searcher.save(str(tmp_path / "state.pkl"))
    restored = _searcher({"scratch": 2, "spt": 3})
    restored.restore(str(tmp_path / "state.pkl"))
    started = {label: len(r.started) for label, r in restored.ledger.released.items()}
    assert started == {"search-scratch": 2, "search-spt": 1} and restored.ledger.owner == searcher.ledger.owner
    rest = [restored.suggest(f"u{i}") for i in range(3)]
    assert [c["lr"] for c in rest[:2]] == [2e-3, 3e-3] and rest[2] == Searcher.FINISHED
    assert before[0]["variant"] == "scratch"


def test_grid_configs_cover_every_combination_per_repeat():
    configs = grid_configs({"lr": tune.loguniform(1e-4, 1e-2)}, {"batch_size": [32, 64]}, repeats=2, seed=0)
    assert [c["batch_size"] for c in configs] == [32, 64, 32, 64]
    assert all(1e-4 <= c["lr"] <= 1e-2 for c in configs) and len({c["lr"] for c in configs}) == 4


def test_random_configs_are_seeded():
    a = [RandomConfigs(dict(SPACE), 3).suggest(str(i)) for i in range(1)]
    b = [RandomConfigs(dict(SPACE), 3).suggest(str(i)) for i in range(1)]
    assert a == b and 1e-4 <= a[0]["lr"] <= 1e-2


class _Trial:
    def __init__(self, trial_id: str, stage: str) -> None:
        self.trial_id, self.config = trial_id, {"stage": stage}


def test_scheduler_routes_each_trial_to_its_stages_asha():
    schedulers = {v: ASHAScheduler(time_attr="training_iteration", max_t=4, grace_period=1) for v in ("a", "b")}
    scheduler = StageScheduler(schedulers)
    assert scheduler.set_search_properties("val_acc", "max")
    trials = [_Trial("a1", "a"), _Trial("b1", "b")]
    for t in trials:
        scheduler.on_trial_add(None, t)
    assert set(schedulers["a"]._trial_info) == {"a1"} and set(schedulers["b"]._trial_info) == {"b1"}


def _asha_decisions(with_other_variant: bool) -> list[str]:
    """Replay one stage's results through StageScheduler, optionally interleaved with a far
    better second stage's, and return the first stage's decisions."""
    from ray.tune.experiment import Trial

    variants = ["scratch", "spt"] if with_other_variant else ["scratch"]
    scheduler = StageScheduler({v: ASHAScheduler(time_attr="training_iteration", max_t=4, grace_period=1,
                                                 reduction_factor=2) for v in variants})
    scheduler.set_search_properties("best_val_acc", "max")
    trials = {(v, i): Trial("StudyTrainable", config={"stage": v}, trial_id=f"x_{v}{i}", stub=True)
              for v in variants for i in range(4)}
    for trial in trials.values():
        scheduler.on_trial_add(None, trial)
    decisions = []
    for epoch in range(1, 5):
        for (variant, i), trial in trials.items():
            accuracy = (0.99 if variant == "spt" else 0.5) + 0.01 * i * epoch
            decision = scheduler.on_trial_result(None, trial, {"training_iteration": epoch, "best_val_acc": accuracy})
            if variant == "scratch":
                decisions.append(f"{i}@{epoch}:{decision}")
    return decisions


def test_asha_decides_for_a_stage_as_if_it_were_alone():
    alone, shared = _asha_decisions(with_other_variant=False), _asha_decisions(with_other_variant=True)
    assert "STOP" in "".join(alone)  # the replay exercises stopping, not only continuing
    assert shared == alone


def test_a_trial_paused_at_a_rung_frees_its_slot():
    searcher = _searcher({"scratch": 2, "spt": 3})
    assert searcher.set_max_concurrency(2)  # Ray's ConcurrencyLimiter leaves the limiting to us
    first, second = searcher.suggest("a"), searcher.suggest("b")
    assert first and second and searcher.suggest("c") is None
    searcher.on_pause("a")  # waiting at a rung of synchronous halving
    assert searcher.suggest("c") is not None and searcher.suggest("d") is None
    searcher.on_unpause("a")  # promoted: it needs its slot back before anything new starts
    searcher.on_trial_complete("b", {"val_acc": 0.5})
    assert searcher.suggest("d") is None
    searcher.on_trial_complete("c", {"val_acc": 0.5})
    assert searcher.suggest("d") is not None


def test_each_stages_view_follows_the_trial_list_across_tunes_per_step_wrappers():
    """Tune passes schedulers a new wrapper of its controller every step; StageScheduler's view of a
    stage keeps up with the one trial list (new trials appended, ended ones dropped) instead of
    rescanning every trial of the study per step, and starts over for another controller's list."""
    from types import SimpleNamespace

    from ray.tune.experiment import Trial

    reads = []

    class FakeTrial:  # what the view reads of a Trial: its config (counted) and status
        def __init__(self, stage: str, status: str) -> None:
            self._config, self.status = {"stage": stage}, status

        @property
        def config(self) -> dict:
            reads.append(self)
            return self._config

    def trial(stage: str, status: str = Trial.PENDING) -> FakeTrial:
        return FakeTrial(stage, status)

    def wrapper(trials: list) -> SimpleNamespace:  # a new object every step, as Tune's TrialRunnerWrapper
        return SimpleNamespace(get_trials=lambda: trials)

    scheduler = StageScheduler({"a": FIFOScheduler(), "b": FIFOScheduler()})
    trials = [trial("a"), trial("b"), trial("a")]
    assert scheduler._view(wrapper(trials), "a").get_trials() == [trials[0], trials[2]]
    trials[0].status = Trial.TERMINATED
    trials.append(trial("a"))
    reads.clear()
    view = scheduler._view(wrapper(trials), "a")
    assert view.get_trials() == [trials[2], trials[3]]
    assert reads == [trials[3]]  # only the new trial was looked at
    other = [trial("a", Trial.PAUSED)]
    assert scheduler._view(wrapper(other), "a").get_trials() == other  # a restored controller: a new list
