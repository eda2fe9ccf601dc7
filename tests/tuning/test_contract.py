"""The contract every sptune scheduler and searcher keeps (as Optuna's pytest_samplers.py does for samplers):
the same decisions whatever order trials finish in and however many run at once, and ties broken by the one
ranking rule (`sptune.rules.ranking`: the better score, then the trial created first).

No Tune run: Ray Tune's own classes play the controller's part. Schedulers get real `Trial` objects and a
stand-in controller that pauses, stops and resumes what they decide, with at most `concurrency` trials
running (a trial paused at a rung holds no slot, as `StagedSearcher` counts them). Searchers are driven
through Tune's own `SearchGenerator` and `ConcurrencyLimiter` (real trials, real experiment tags), and
their trials end in an order a seeded RNG picks.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
from ray import tune
from ray.tune.experiment import Experiment, Trial
from ray.tune.schedulers import ASHAScheduler, TrialScheduler
from ray.tune.search import ConcurrencyLimiter, Searcher, SearchGenerator
from ray.tune.search.optuna import OptunaSearch

from sptune.judging.selection import TrialOutcome
from sptune.judging.stage_graph import Stage, variant_stages
from sptune.plan.study_plan import build_plan
from sptune.rules.ranking import creation_index, rank_key
from sptune.rules.rungs import rung_sizes
from sptune.spec import load_spec
from sptune.tasks.base import TaskInfo
from sptune.tuning.schedulers.by_stage import StageScheduler
from sptune.tuning.schedulers.halving import SuccessiveHalving
from sptune.tuning.schedulers.hyperband import Hyperband
from sptune.tuning.searchers import BatchedSearcher, FixedConfigs, RandomConfigs, grid_configs, tpe_sampler
from sptune.tuning.tuner import staged_search
from tests.helpers_tune import Controller
from tests.helpers_tune import stub_trial as _trial

optuna.logging.set_verbosity(optuna.logging.WARNING)

MAX_T = 8
N_TRIALS = 9
ORDERS = range(6)  # seeds of the finish order
CONCURRENCY = (1, 2, 3, N_TRIALS)


def _curves(seed: int, n: int = N_TRIALS, levels: int = 5) -> list[list[float]]:
    """Per trial, a score per epoch on a coarse grid of values, so that many trials tie at a rung."""
    rng = random.Random(seed)
    return [[rng.randrange(levels) / levels for _ in range(MAX_T)] for _ in range(n)]


# ------------------------------------------------------------------ schedulers


def drive_scheduler(
    scheduler: TrialScheduler, trials: list[Trial], curves: dict[str, list[float]], mode: str, order: int,
    concurrency: int,
) -> dict[str, int]:
    """Run `trials` (in creation order) through the scheduler; each epoch reported by a running trial that
    `order` picks, at most `concurrency` live at once. The epochs each trial trained."""
    pick, controller = random.Random(order), Controller(scheduler)
    waiting, epochs = list(trials), {t.trial_id: 0 for t in trials}
    while waiting or any(t.status != Trial.TERMINATED for t in controller.trials):
        slots = concurrency - sum(t.status in (Trial.RUNNING, Trial.PENDING) for t in controller.trials)
        if waiting and slots > 0 and pick.random() < 0.6:  # the searcher proposes the next trial
            controller.add(waiting.pop(0))
        while len(controller.running()) < concurrency and (chosen := scheduler.choose_trial_to_run(controller)):
            chosen.set_status(Trial.RUNNING)
        running = controller.running()
        if not running:
            assert waiting, "no trial runs and none is left to start: the scheduler would hang"
            continue
        trial = pick.choice(running)
        epochs[trial.trial_id] += 1
        _report(controller, trial, epochs[trial.trial_id], curves[trial.trial_id], mode)
    return epochs


def _report(controller: Controller, trial: Trial, epoch: int, curve: list[float], mode: str) -> None:
    value = curve[epoch - 1] if mode == "max" else 1 - curve[epoch - 1]  # min mode: a loss
    result = {"training_iteration": epoch, "score": value, "done": epoch >= MAX_T}
    decision = controller.scheduler.on_trial_result(controller, trial, result)
    if result["done"] or decision == TrialScheduler.STOP:
        controller.stop_trial(trial)
    elif decision == TrialScheduler.PAUSE:
        trial.set_status(Trial.PAUSED)


def ranked_halving(indices: list[int], curves: list[list[float]], rungs: list[int], mode: str, eta: float) -> dict:
    """The decisions the ranking rule gives: at each rung the best ⌈entered/η⌉ by `rank_key` go on."""
    score = "val_acc" if mode == "max" else "val_loss"
    sizes, alive, epochs = rung_sizes(len(indices), eta, len(rungs)), list(indices), {}
    for step, rung in enumerate(rungs):
        value = {i: curves[i - 1][rung - 1] if mode == "max" else 1 - curves[i - 1][rung - 1] for i in alive}
        alive = sorted(alive, key=lambda i: rank_key({score: value[i]}, score, i))
        epochs.update({f"t{i}": rung for i in alive[sizes[step + 1] :]})
        alive = alive[: sizes[step + 1]]
    epochs.update({f"t{i}": MAX_T for i in alive})
    return epochs


def _sha(mode: str) -> tuple[TrialScheduler, list[Trial], Callable[[list[list[float]]], dict]]:
    scheduler = SuccessiveHalving(N_TRIALS, MAX_T, 1, 2, "score", mode)
    trials = [_trial(i) for i in range(1, N_TRIALS + 1)]
    return scheduler, trials, lambda c: ranked_halving(list(range(1, N_TRIALS + 1)), c, scheduler.rungs, mode, 2)


def _hyperband(mode: str) -> tuple[TrialScheduler, list[Trial], Callable[[list[list[float]]], dict]]:
    scheduler = Hyperband(N_TRIALS, MAX_T, 1, 2, "score", mode)
    trials = [_trial(i) for i in range(1, N_TRIALS + 1)]

    def expected(curves: list[list[float]]) -> dict:
        out, first = {}, 1
        for n, rungs in scheduler.plan:  # the brackets take the trials in creation order
            out.update(ranked_halving(list(range(first, first + n)), curves, rungs, mode, 2))
            first += n
        return out

    return scheduler, trials, expected


def _by_stage(mode: str) -> tuple[TrialScheduler, list[Trial], Callable[[list[list[float]]], dict]]:
    """Two stages of halving in one StageScheduler, their trials created interleaved."""
    stage_of = {i: "a" if i % 2 else "b" for i in range(1, N_TRIALS + 1)}
    members = {s: [i for i, t in stage_of.items() if t == s] for s in ("a", "b")}
    schedulers = {s: SuccessiveHalving(len(m), MAX_T, 1, 2, "score", mode) for s, m in members.items()}
    scheduler = StageScheduler(schedulers)
    trials = [_trial(i, stage_of[i]) for i in range(1, N_TRIALS + 1)]

    def expected(curves: list[list[float]]) -> dict:
        out = {}
        for stage, indices in members.items():
            out.update(ranked_halving(indices, curves, schedulers[stage].rungs, mode, 2))
        return out

    return scheduler, trials, expected


SCHEDULERS = {"sha": _sha, "hyperband": _hyperband, "by_stage": _by_stage}


@pytest.mark.parametrize("mode", ["max", "min"])
@pytest.mark.parametrize("kind", list(SCHEDULERS))
@pytest.mark.parametrize("curve_seed", [0, 1, 2])
def test_scheduler_decides_by_the_ranking_rule_in_any_order_at_any_concurrency(kind, mode, curve_seed):
    curves = _curves(curve_seed)
    outcomes = []
    for concurrency in CONCURRENCY:
        for order in ORDERS:
            scheduler, trials, expected = SCHEDULERS[kind](mode)
            by_id = {t.trial_id: curves[creation_index(t.experiment_tag) - 1] for t in trials}
            outcomes.append(drive_scheduler(scheduler, trials, by_id, mode, order, concurrency))
    assert all(o == outcomes[0] for o in outcomes)
    assert outcomes[0] == expected(curves)
    assert len(set(outcomes[0].values())) > 1  # the curves make it stop some trials early


@pytest.mark.parametrize("kind", list(SCHEDULERS))
def test_scheduler_breaks_ties_in_favour_of_the_trial_created_first(kind):
    flat = [[0.5] * MAX_T for _ in range(N_TRIALS)]
    scheduler, trials, expected = SCHEDULERS[kind]("max")
    by_id = {t.trial_id: flat[0] for t in trials}
    epochs = drive_scheduler(scheduler, trials, by_id, "max", order=3, concurrency=2)
    assert epochs == expected(flat)
    longest = max(epochs.values())
    assert epochs["t1"] == longest  # the first created wins every tie it is in


def test_the_contract_catches_a_scheduler_that_decides_by_finish_order():
    """Ray's ASHA through the same driver: promotions depend on who reached a rung first."""
    curves = _curves(0)
    outcomes = set()
    for order in ORDERS:
        asha = ASHAScheduler(time_attr="training_iteration", max_t=MAX_T, grace_period=1, reduction_factor=2)
        asha.set_search_properties("score", "max")
        trials = [_trial(i) for i in range(1, N_TRIALS + 1)]
        by_id = {t.trial_id: curves[i] for i, t in enumerate(trials)}
        outcomes.add(tuple(sorted(drive_scheduler(asha, trials, by_id, "max", order, concurrency=3).items())))
    assert len(outcomes) > 1


# ------------------------------------------------------------------ searchers

SPACE = {"lr": tune.loguniform(1e-4, 1e-2), "batch_size": tune.choice([32, 64])}
BATCH = 3


def _accuracy(config: dict) -> float:
    """A deterministic score of a config, coarse enough that configs tie."""
    return round(1.0 - abs(math.log10(config["lr"]) + 3.0) / 2, 1) + (0.05 if config["batch_size"] == 32 else 0)


def drive_searcher(
    searcher: Searcher, n_trials: int, order: int, concurrency: int, ended: Callable[[Trial, dict], None] | None = None
) -> list[Trial]:
    """Tune's SearchGenerator over the searcher (limited to `concurrency` live trials, as the Tuner's
    ConcurrencyLimiter does); a live trial picked by `order` ends whenever no new one can start."""
    generator = SearchGenerator(ConcurrencyLimiter(searcher, max_concurrent=concurrency))
    generator.add_configurations([Experiment("contract", lambda config: None, num_samples=n_trials, config={})])
    pick, live, created = random.Random(order), [], []
    while True:
        while (trial := generator.next_trial()) is not None:
            live.append(trial)
            created.append(trial)
        if not live:
            assert generator.is_finished(), "the searcher waits, but no trial is running: the Tuner would hang"
            return created
        trial = live.pop(pick.randrange(len(live)))
        result = {**trial.config, "training_iteration": MAX_T, "score": _accuracy(trial.config)}
        generator.on_trial_result(trial.trial_id, result)
        generator.on_trial_complete(trial.trial_id, result)
        if ended is not None:
            ended(trial, result)


def _batched_optuna() -> Searcher:
    inner = OptunaSearch(OptunaSearch.convert_search_space(SPACE), metric="score", mode="max",
                         sampler=tpe_sampler(seed=0, n_trials=N_TRIALS))
    return BatchedSearcher(inner, BATCH, N_TRIALS, settle_epoch=None)


def _grid() -> Searcher:
    return FixedConfigs(grid_configs({"lr": SPACE["lr"]}, {"batch_size": [32, 64]}, repeats=2, seed=0))


SEARCHERS = {
    "batched_optuna": (_batched_optuna, N_TRIALS),
    "grid": (_grid, 4),
    "random": (lambda: RandomConfigs(dict(SPACE), seed=0), N_TRIALS),
}


def _proposed(trials: list[Trial]) -> list[tuple]:
    return [(t.config["lr"], t.config["batch_size"], t.config.get("seed")) for t in trials]


@pytest.mark.parametrize("kind", list(SEARCHERS))
def test_searcher_proposes_the_same_configs_in_any_order_at_any_concurrency(kind):
    make, n_trials = SEARCHERS[kind]
    runs = [_proposed(drive_searcher(make(), n_trials, order, concurrency))
            for concurrency in (1, 2, BATCH, 5) for order in ORDERS]
    assert all(run == runs[0] for run in runs)
    assert len(runs[0]) == n_trials and len(set(runs[0])) == n_trials


def test_the_contract_catches_a_searcher_told_in_finish_order():
    """Ray's OptunaSearch told results as trials finish (searcher.mode: async) proposes by finish order."""
    def told_as_finished() -> Searcher:
        return OptunaSearch(OptunaSearch.convert_search_space(SPACE), metric="score", mode="max",
                            sampler=tpe_sampler(seed=0, n_trials=N_TRIALS))

    runs = {tuple(_proposed(drive_searcher(told_as_finished(), N_TRIALS, order, BATCH))) for order in ORDERS}
    assert len(runs) > 1


# ------------------------------------------------------------------ the staged searcher

DIGITS = TaskInfo("digits", "continuous", 64, 10, levels=17)
STAGED = ["pretrain.num_samples=4", "variants.scratch.num_samples=5", "variants.spt.num_samples=4",
          "rerun_seeds=2", "scheduler.type=sha", "scheduler.grace_period=1", "searcher.type=optuna"]


def _staged_plan(repo_root: str):
    spec = load_spec(Path(repo_root) / "search_spaces" / "digits_quick.yaml", STAGED)
    return build_plan(spec, DIGITS, cluster_cpus=2)


def _stages(plan) -> list[Stage]:
    """The study's stages as digits_quick chains them: each variant's search, its LR extension's rounds, its
    candidates (seed-robust selection), its re-runs."""
    seeds = tuple(plan.rerun_seeds())
    stages = [Stage(p) for p in plan.pretrainings()]
    for search in plan.variant_searches():
        stages += variant_stages(plan, search, seeds, search.init_from)
    return stages


def _checkpoint(config: dict) -> str:
    """A trial's checkpoint, named by what it trained (not by its trial id, which differs between runs)."""
    return f"/ckpt/{config['stage']}/{config['lr']:.6g}-{config['batch_size']}-{config['seed']}"


def run_staged(repo_root: str, order: int, concurrency: int, score: Callable[[dict], float]) -> dict:
    """The study's staged searcher over every stage; per stage, the configs it proposed (in its own order)
    and what it selected."""
    plan = _staged_plan(repo_root)
    searcher, _ = staged_search(plan, _stages(plan), {}, {})

    def ended(trial: Trial, result: dict) -> None:  # what StageRecorder hands the searcher
        value = score(trial.config)
        epoch = {"val_acc": value, "val_loss": 1 - value, "epoch": 2}
        metrics = {"experiment_tag": trial.experiment_tag, "training_iteration": 2, "diverged": 0}
        kept = [(SimpleNamespace(path=_checkpoint(trial.config)), epoch)]
        searcher.ledger.trial_ended(trial.trial_id, TrialOutcome(dict(trial.config), metrics, None, "", kept))

    ledger = searcher.ledger
    total = sum(s.budget for s in ledger.stages.values())
    trials = drive_searcher(searcher, total, order, concurrency, ended)
    proposed: dict[str, list] = {}
    for trial in trials:
        c = trial.config
        proposed.setdefault(c["stage"], []).append((c["lr"], c["batch_size"], c["seed"], c.get("spt_checkpoint")))
    selected = {label: [(s.config["lr"], s.config["seed"], s.checkpoint_path) for s in picked]
                for label, picked in ledger.selected.items()}
    assert not ledger.failed and set(selected) == set(ledger.stages)
    return {"proposed": proposed, "selected": selected, "tags": [t.experiment_tag for t in trials]}


def test_staged_searcher_proposes_and_selects_the_same_in_any_order_at_any_concurrency(repo_root):
    runs = [run_staged(repo_root, order, concurrency, _accuracy) for concurrency in (1, 2, 4) for order in (0, 1, 2)]
    for run in runs:
        assert run["proposed"] == runs[0]["proposed"] and run["selected"] == runs[0]["selected"]
    assert len({tuple(run["tags"]) for run in runs}) > 1  # the stages' trials did interleave differently


def test_staged_searcher_breaks_ties_by_the_ranking_rule(repo_root):
    """Every trial of a stage scores the same: each stage selects its first-proposed config, the lowest
    `rank_key` (equal scores, equal epochs: the trial created first), whatever the order and concurrency."""
    for concurrency, order in ((1, 0), (3, 1), (4, 2)):
        run = run_staged(repo_root, order, concurrency, lambda config: 0.5)
        for label, proposed in run["proposed"].items():
            if label.startswith("rerun") or label.endswith("-rerun"):
                continue  # re-runs select one trial per seed
            if label.startswith(("extend-", "candidates-")):  # ties keep the search's pick, created first
                assert run["selected"][label] == run["selected"][f"search-{label.split('-')[1]}"], label
                continue
            first = proposed[0]
            [(lr, seed, _)] = run["selected"][label]
            assert (lr, seed) == (first[0], first[2]), label


def test_staged_searcher_extends_the_lr_range_and_picks_the_same_in_any_order(repo_root):
    """A score rising with the LR puts every search's pick at its top bound: the LR extension's rounds run, and
    they, the candidates and every pick are the same whatever the order and concurrency."""
    def rising(config: dict) -> float:
        return round(0.5 + 0.1 * math.log10(config["lr"] / 1e-4), 3)

    runs = [run_staged(repo_root, order, concurrency, rising) for concurrency in (1, 2, 4) for order in (0, 1, 2)]
    for run in runs:
        assert run["proposed"] == runs[0]["proposed"] and run["selected"] == runs[0]["selected"]
    proposed = runs[0]["proposed"]
    assert {"extend-scratch-1", "extend-scratch-2"} <= set(proposed)
    for variant in ("scratch", "spt"):  # a search extends exactly when its pick is within 1.5x of the top bound
        [(pick, *_)] = runs[0]["selected"][f"search-{variant}"]
        assert (f"extend-{variant}-1" in proposed) == (pick * 1.5 >= 1e-2), variant
    assert [lr for lr, *_ in proposed["extend-scratch-2"]] == [0.05623, 0.1]
    assert runs[0]["selected"]["candidates-scratch"][0][0] == 0.1
