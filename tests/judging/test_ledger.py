"""The stage ledger's contract, without Tune (nor Ray): the same releases, selections and failures whatever order
trials end in; what a stage needs is selected before it is released; a stage with nothing usable fails, and a stall
fails every stage still waiting; pickled mid-run or resumed from the state's JSON, it selects the same."""

from __future__ import annotations

import json
import math
import pickle
import random
from dataclasses import asdict
from pathlib import Path
from types import SimpleNamespace

import pytest

from sptune.judging.ledger import Ledger, StageFailed, StageReleased, StageSelected
from sptune.judging.selection import Selection, TrialOutcome
from sptune.judging.stage_graph import Stage, StageKind, variant_stages
from sptune.judging.stage_picks import spt_checkpoints_of
from sptune.plan.study_plan import build_plan
from sptune.spec import load_spec
from sptune.tasks.base import TaskInfo

DIGITS = TaskInfo("digits", "continuous", 64, 10, levels=17)
# Every kind of stage: pretraining, each variant's search, 2 LR extension rounds, candidates, re-runs.
SPEC = ["pretrain.num_samples=3", "variants.scratch.num_samples=4", "variants.spt.num_samples=4", "rerun_seeds=2"]


@pytest.fixture(scope="module")
def plan(repo_root):
    spec = load_spec(Path(repo_root) / "search_spaces" / "digits_quick.yaml", SPEC)
    return build_plan(spec, DIGITS, cluster_cpus=2)


def _stages(plan) -> list[Stage]:
    seeds = tuple(plan.rerun_seeds())
    stages = [Stage(p) for p in plan.pretrainings()]
    for search in plan.variant_searches():
        stages += variant_stages(plan, search, seeds, search.init_from)
    return stages


def _search_configs(stage: Stage) -> list[dict]:
    """A search stage's configs (what its own searcher would propose): LRs spread over its range, both ends in."""
    lr = stage.search.space.lr
    n = stage.budget
    lrs = [lr.low * (lr.high / lr.low) ** (i / (n - 1)) for i in range(n)]
    return [{"lr": round(x, 8), "batch_size": 32 * (1 + i % 2), "seed": 0} for i, x in enumerate(lrs)]


def rising(config: dict) -> tuple[float, bool]:
    """Higher LRs score higher (every pick at its top bound: the extension runs), each seed a little apart."""
    return round(0.5 + 0.1 * math.log10(float(config["lr"]) / 1e-5) + 0.001 * (config["seed"] % 7), 6), False


def drive(ledger: Ledger, score, order: int, concurrent: int = 3, stop_after: int | None = None) -> list:
    """Start what the released stages give, up to `concurrent` at once; end a live trial picked by `order`.
    Returns every event, in order."""
    pick, live, events, started, given = random.Random(order), [], [], 0, {}
    while stop_after is None or started < stop_after:
        ledger.advance()
        for release in ledger.releases():
            given.setdefault(release.label, list(release.configs or _search_configs(ledger.stages[release.label])))
        ready = [label for label in ledger.released if ledger.wants_trial(label)]
        if ready and len(live) < concurrent:
            label = ready[0]
            config = {**given[label][len(ledger.released[label].started)], "stage": label}
            trial_id = f"t{started:03d}"
            ledger.trial_started(trial_id, label)
            live.append((trial_id, config, started))
            started += 1
            continue
        if not live:
            events += ledger.take_events()
            if ledger.open():
                ledger.stall()
                events += ledger.take_events()
            return events
        trial_id, config, index = live.pop(pick.randrange(len(live)))
        events += ledger.trial_ended(trial_id, _outcome(trial_id, index, config, *score(config)))
    return events


def _outcome(trial_id: str, index: int, config: dict, value: float, diverged: bool) -> TrialOutcome:
    epoch = {"val_acc": value, "val_loss": 1 - value, "epoch": 4}
    metrics = {"trial_id": trial_id, "experiment_tag": f"{index + 1}_x", "training_iteration": 4,
               "diverged": diverged, "best_val_acc": value, "best_val_loss": 1 - value}
    path = f"/ckpt/{config['stage']}/{config['lr']:.6g}-{config['seed']}"  # by what it trained, not its trial id
    kept = [] if diverged else [(SimpleNamespace(path=path), epoch)]
    return TrialOutcome(config, metrics, None, "", kept)


def _picks(ledger: Ledger) -> dict:
    return {label: [(s.config["lr"], s.config["seed"], s.checkpoint_path, s.epoch) for s in picked]
            for label, picked in ledger.selected.items()}


def _selected_events(events: list) -> dict:
    """What each StageSelected event says, but its times and trial ids (they follow the order trials ran in)."""
    found = {}
    for e in events:
        if isinstance(e, StageSelected):
            picked = [(s.config["lr"], s.config["seed"], s.score) for s in e.pick.picked]
            found[e.label] = (e.kind, e.variant, e.final, picked, e.pick.candidates, sorted(map(str, e.trial_scores)))
    return found


def test_the_same_releases_and_selections_whatever_order_trials_end_in(plan):
    runs = []
    for order in range(5):
        ledger = Ledger(_stages(plan), {}, {})
        events = drive(ledger, rising, order, concurrent=1 + order % 4)
        releases = {e.label: e for e in events if isinstance(e, StageReleased)}
        runs.append((_picks(ledger), ledger.candidates, _selected_events(events), releases, ledger.failed))
    assert set(runs[0][0]) == {s.label for s in _stages(plan)} and runs[0][4] == {}
    assert {"extend-scratch-2", "candidates-spt"} <= set(runs[0][3])  # every kind of stage ran
    assert all(run == runs[0] for run in runs)


def test_a_stage_is_released_only_after_what_it_needs_is_selected(plan):
    ledger = Ledger(_stages(plan), {}, {})
    events = drive(ledger, rising, order=3)
    selected_before: set[str] = set()
    for event in events:
        if isinstance(event, StageReleased):
            assert set(ledger.stages[event.label].needs) <= selected_before, event.label
        elif isinstance(event, StageSelected):
            selected_before.add(event.label)
    spt_search = next(e for e in events if isinstance(e, StageReleased) and e.label == "search-spt")
    assert spt_search.configs is None and spt_search.carry == {"spt_checkpoint": ledger.selected["pretrain"][0]
                                                               .checkpoint_path}
    reruns = next(e for e in events if isinstance(e, StageReleased) and e.label == "rerun-scratch")
    pick = ledger.selected["candidates-scratch"][0].config
    assert [(c["lr"], c["seed"]) for c in reruns.configs] == [(pick["lr"], s) for s in plan.rerun_seeds()]


def test_a_stage_with_nothing_usable_fails_and_what_needs_it_never_starts(plan):
    def pretraining_diverges(config: dict) -> tuple[float, bool]:
        return rising(config)[0], config["stage"] == "pretrain"

    ledger = Ledger(_stages(plan), {}, {})
    events = drive(ledger, pretraining_diverges, order=1)
    failed = [e for e in events if isinstance(e, StageFailed)]
    assert [e.label for e in failed] == ["pretrain"] and "diverged" in failed[0].problem
    spt = {s.label for s in _stages(plan) if s.search.variant == "spt"}
    assert not spt & set(ledger.released) and not spt & set(ledger.failed)  # never released, never stalled
    assert set(ledger.selected) == {s.label for s in _stages(plan) if s.search.variant == "scratch"}
    assert not ledger.open()


def test_a_stall_fails_every_stage_still_waiting(plan):
    ledger = Ledger(_stages(plan), {}, {})
    ledger.advance()
    ledger.trial_started("lost", "pretrain")  # Tune never runs it, and its end never comes
    ledger.stall()
    failed = {e.label: e for e in ledger.take_events() if isinstance(e, StageFailed)}
    assert set(failed) == {s.label for s in _stages(plan)}
    assert "waits for 1 trial(s)" in failed["pretrain"].problem and "waits for 0" in failed["search-spt"].problem
    assert not ledger.open()


def test_a_ledger_pickled_mid_run_selects_the_same(plan):
    straight = Ledger(_stages(plan), {}, {})
    drive(straight, rising, order=2)
    ledger = Ledger(_stages(plan), {}, {})
    drive(ledger, rising, order=2, stop_after=9)  # pretraining selected, searches under way
    assert ledger.selected and len(ledger.selected) < len(ledger.stages)
    resumed = Ledger(_stages(plan), {}, {})
    resumed.load(pickle.loads(pickle.dumps(ledger)))  # in place, as the searcher's restore does
    live = [t for t, label in resumed.owner.items() if t not in resumed.released[label].ended]
    for trial_id in live:  # Tune runs the unfinished trials again
        label = resumed.owner[trial_id]
        index = resumed.released[label].started.index(trial_id)
        config = {**(resumed.released[label].release.configs or _search_configs(resumed.stages[label]))[index],
                  "stage": label}
        resumed.trial_ended(trial_id, _outcome(trial_id, int(trial_id[1:]), config, *rising(config)))
    drive(resumed, rising, order=2)
    assert _picks(resumed) == _picks(straight) and resumed.candidates == straight.candidates


def test_a_study_resumed_from_its_state_json_selects_the_same(plan):
    """--resume without a Tuner to restore: the stages still to select start again from what the state recorded
    (the events' selections through JSON), and select what an uninterrupted study does."""
    straight = Ledger(_stages(plan), {}, {})
    drive(straight, rising, order=0)
    ledger = Ledger(_stages(plan), {}, {})
    events = drive(ledger, rising, order=0, stop_after=12)
    saved = json.loads(json.dumps({e.label: {"selected": [asdict(s) for s in e.pick.picked],
                                             "ranked": None if e.pick.ranked is None else
                                             [asdict(s) for s in e.pick.ranked]}
                                   for e in events if isinstance(e, StageSelected)}))
    assert "pretrain" in saved and len(saved) < len(_stages(plan))
    selections = {label: [Selection(**s) for s in r["selected"]] for label, r in saved.items()}
    ranked = {label: [Selection(**s) for s in r["ranked"]] for label, r in saved.items() if r["ranked"]}
    by_label = {s.label: s for s in _stages(plan)}
    given = {label: spt_checkpoints_of(by_label[label], picked) for label, picked in selections.items()
             if by_label[label].search.is_pretraining}  # what Study gives as the pretraining's checkpoint
    left = [s for s in _stages(plan) if s.label not in selections]
    resumed = Ledger(left, given, selections, ranked)
    drive(resumed, rising, order=4)
    assert _picks(resumed) == _picks(straight)


def test_a_stage_kind_is_explicit_and_its_fields_must_fit_it(plan):
    search = plan.variant_searches()[0]
    assert Stage(search).kind is StageKind.SEARCH and Stage.rerun(search, (1000,)).kind is StageKind.RERUN
    with pytest.raises(ValueError, match="rerun stage"):
        Stage(search, StageKind.RERUN)  # re-runs of no seed
    with pytest.raises(ValueError, match="search stage"):
        Stage(search, seeds=(1, 2))  # a search's seeds come from its searcher
    with pytest.raises(ValueError, match="extend stage"):
        Stage(search, StageKind.EXTEND, (5000,), after=search.label)  # no round
