"""Seed-robust selection (`selection: {top_k, seeds}`): a variant's K best search configs are re-trained with M
seeds no search trial and no re-run uses, to the end; the pick is the best mean validation score by the one
ranking rule; the re-runs train that pick with their own seeds. Checked on the study's staged searcher (no Ray),
its plan, its state and its results."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest

from sptune.errors import SpecError
from sptune.judging.results import write_results
from sptune.judging.robust_selection import CandidateRuns, candidate_lines, pick_candidate
from sptune.judging.stage_graph import variant_stages
from sptune.plan.cost import stage_epochs
from sptune.plan.dry_run_text import describe
from sptune.plan.study_plan import build_plan
from sptune.rules import seeds
from sptune.spec import apply_override, from_dict, read_yaml
from sptune.study.publish import results_document
from sptune.study.state import SearchRecord, SelectedTrial, StudyState
from tests.helpers_staged import DIGITS, run
from tests.helpers_tiny import PLAIN_PICK

SMALL = ["pretrain=null", "variants.spt=null", "variants.scratch.num_samples=5", "rerun_seeds=2",
         "scheduler.type=fifo", "searcher.type=random", *PLAIN_PICK]
ROBUST = ["selection.top_k=3", "selection.seeds=2"]


def _plan(repo_root: str, *overrides: str):
    """digits_quick with scratch alone (no pretraining): one variant's search, candidates and re-runs."""
    data = read_yaml(Path(repo_root) / "search_spaces" / "digits_quick.yaml")
    for assignment in (*SMALL, *overrides):
        apply_override(data, assignment)
    data["variants"] = {k: v for k, v in data["variants"].items() if v is not None}
    return build_plan(from_dict(data), DIGITS, cluster_cpus=2)


def _stages(plan):
    return variant_stages(plan, plan.variant_searches()[0], tuple(plan.rerun_seeds()), None)


def lucky_at_the_top(config: dict) -> tuple[float, bool]:
    """Search trials (seed 0) rank by LR, the highest first; re-trained with any other seed the highest LR
    collapses and the second-highest is best: one seed's luck picked the search's winner."""
    lr = float(config["lr"])
    if config["seed"] == 0:
        return lr * 10, False
    return {0: 0.30, 1: 0.95}.get(config.get("candidate"), 0.90), False


def _by_stage(configs: dict) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for config in configs.values():
        found.setdefault(config["stage"], []).append(config)
    return found


# ------------------------------------------------------------------ the spec and the seeds


def test_selection_is_off_by_default_and_refused_half_set(repo_root):
    assert _plan(repo_root).spec.selection.enabled is False and _plan(repo_root).candidate_seeds() == []
    assert _plan(repo_root, *ROBUST).candidate_seeds() == [2000, 2001]
    for overrides, field in ((["selection.top_k=3"], "selection.seeds"), (["selection.seeds=2"], "selection.top_k")):
        with pytest.raises(SpecError) as refused:
            _plan(repo_root, *overrides)
        assert refused.value.where == field


def test_candidate_seeds_are_no_search_trials_and_no_reruns():
    highest_search = seeds.search_seeds(7, seeds.MAX_GRID_REPEATS)[-1]
    extension = seeds.extension_seeds(7, 0, seeds.MAX_EXTENSION_TRIALS)
    reruns = seeds.rerun_seeds(7, seeds.MAX_RERUN_SEEDS)
    candidates = seeds.candidate_seeds(7, seeds.MAX_CANDIDATE_SEEDS)
    assert highest_search < extension[0] and extension[-1] < reruns[0] and reruns[-1] < candidates[0]
    assert len({*range(7, highest_search + 1), *extension, *reruns, *candidates}) == \
        highest_search - 6 + len(extension) + len(reruns) + len(candidates)


# ------------------------------------------------------------------ the stages


def test_the_pick_is_the_best_mean_over_fresh_seeds_and_reruns_train_it(repo_root):
    plan = _plan(repo_root, *ROBUST)
    ledger, configs = run(plan, _stages(plan), lucky_at_the_top)
    by_stage = _by_stage(configs)
    assert Counter({k: len(v) for k, v in by_stage.items()}) == {"search-scratch": 5, "candidates-scratch": 6,
                                                                 "rerun-scratch": 2}
    ranked = sorted(by_stage["search-scratch"], key=lambda c: -c["lr"])[:3]  # the search's 3 best configs
    candidates = by_stage["candidates-scratch"]
    assert [(c["lr"], c["batch_size"], c["candidate"], c["seed"]) for c in candidates] == \
        [(r["lr"], r["batch_size"], i, s) for i, r in enumerate(ranked) for s in (2000, 2001)]
    assert all(c["phase"] == "candidate" for c in candidates)
    # The search's winner was lucky; the pick is the second, and the re-runs train it with their own seeds.
    assert ledger.selected["search-scratch"][0].config["lr"] == ranked[0]["lr"]
    assert ledger.selected["candidates-scratch"][0].config["lr"] == ranked[1]["lr"]
    reruns = by_stage["rerun-scratch"]
    assert [(c["lr"], c["seed"]) for c in reruns] == [(ranked[1]["lr"], 1000), (ranked[1]["lr"], 1001)]
    entries = ledger.candidates["candidates-scratch"]
    assert [e["picked"] for e in entries] == [False, True, False]
    assert entries[1]["val_acc_per_seed"] == [0.95, 0.95] and entries[1]["mean"] == pytest.approx(0.95)
    assert entries[0]["mean"] == pytest.approx(0.30) and entries[0]["seeds"] == [2000, 2001]


def test_a_search_with_fewer_trials_than_top_k_has_them_all_as_candidates(repo_root):
    # A second variant searches 7 trials: a top_k no search reaches is refused (sweep_spec.check_selection_top_k).
    wide = ("variants.wide={kind: scratch, num_samples: 7, search: {lr: {type: loguniform, low: 1.0e-4, high: 1.0e-2}, "
            "batch_size: {type: choice, values: [32, 64]}}}")
    plan = _plan(repo_root, "selection.top_k=7", "selection.seeds=2", wide)
    assert plan.variant_searches()[0].variant == "scratch"
    assert "Total: 40 trials" in describe(plan)  # scratch: 5 + 5 x 2 candidates + 2 re-runs; wide: 7 + 7 x 2 + 2
    ledger, configs = run(plan, _stages(plan), lucky_at_the_top)
    assert sorted(c["candidate"] for c in _by_stage(configs)["candidates-scratch"]) == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert len(ledger.candidates["candidates-scratch"]) == 5


def test_the_pick_is_the_same_in_any_order_at_any_concurrency(repo_root):
    plan = _plan(repo_root, *ROBUST)

    def noisy(config: dict) -> tuple[float, bool]:  # candidates tie on means in pairs: the rule breaks the ties
        return round((float(config["lr"]) * 1e4 + config["seed"] * 7) % 1, 1), False

    runs = []
    for concurrent, order in ((1, 0), (2, 1), (3, 2), (5, 3)):
        ledger, configs = run(plan, _stages(plan), noisy, order, concurrent)
        stages = _by_stage(configs)
        runs.append(({k: [(c["lr"], c["seed"]) for c in v] for k, v in stages.items()},
                     {k: [(s.config["lr"], s.config["seed"]) for s in v] for k, v in ledger.selected.items()},
                     ledger.candidates))
    assert all(r == runs[0] for r in runs)


def test_candidates_rank_by_the_rule_on_means_ties_to_the_search_and_diverged_seeds_last():
    def runs(*accs: float | None) -> CandidateRuns:
        return CandidateRuns({"lr": 1.0}, tuple(range(len(accs))),
                             tuple(None if a is None else {"val_acc": a, "val_loss": 1 - a, "epoch": 3} for a in accs))

    assert pick_candidate([runs(0.8, 0.9), runs(0.9, 0.85)]) == 1  # mean 0.875 beats 0.85
    assert pick_candidate([runs(0.9, 0.8), runs(0.8, 0.9)]) == 0  # equal means: the search's better-ranked
    assert pick_candidate([runs(0.99, None), runs(0.5, 0.5)]) == 1  # a diverged seed ranks after every full one
    assert pick_candidate([runs(None, None), runs(None, None)]) == 0


# ------------------------------------------------------------------ plan, state, resume, results


def test_the_plan_says_what_candidates_add_and_the_cost_counts_them(repo_root):
    off, on = _plan(repo_root), _plan(repo_root, *ROBUST)
    text = describe(on)
    assert "candidates: each variant's 3 best search configs" in text and "seeds 2000–2001" in text
    assert "candidates" not in describe(off)
    epochs = on.variant_searches()[0].epochs
    assert stage_epochs(on).finetune - stage_epochs(off).finetune == 3 * 2 * epochs
    assert "Total: 13 trials" in text and "Total: 7 trials" in describe(off)


def test_a_resumed_study_redoes_neither_the_search_nor_finished_candidates(repo_root, tmp_path):
    plan = _plan(repo_root, *ROBUST)
    ledger, _ = run(plan, _stages(plan), lucky_at_the_top)
    search = SearchRecord([SelectedTrial(ledger.selected["search-scratch"][0], None)], None,
                          ledger.ranked["search-scratch"])
    stored = json.loads(json.dumps({"searches": {"search-scratch": _as_json(search)}}))
    state = StudyState.from_json(stored)
    assert state.searches["search-scratch"].ranked == ledger.ranked["search-scratch"]
    # A new Tuner after the search was recorded: its candidates come from the recorded ranking.
    left = [s for s in _stages(plan) if s.label not in state.searches]
    selections = {label: [p.selection for p in r.selected] for label, r in state.searches.items()}
    ranked = {label: r.ranked for label, r in state.searches.items() if r.ranked}
    resumed, configs = run(plan, left, lucky_at_the_top, selections=selections, ranked=ranked)
    assert {c["stage"] for c in configs.values()} == {"candidates-scratch", "rerun-scratch"}
    assert resumed.selected["candidates-scratch"] == ledger.selected["candidates-scratch"]
    # Once the candidates are recorded, the study's stages leave them out.
    needs = _study_stages(plan, tmp_path, {"search-scratch": search, "candidates-scratch": search})
    assert needs == {"rerun-scratch": ("candidates-scratch",)}


def _as_json(record: SearchRecord) -> dict:
    from dataclasses import asdict

    return json.loads(json.dumps(asdict(record), default=str))


def _study_stages(plan, out: Path, done: dict) -> dict:
    from sptune.study.pretraining import PretrainedWithoutTrials
    from sptune.study.state import StateFile
    from sptune.study.study import Study

    study = Study.__new__(Study)
    study.plan, study.state_file = plan, StateFile(out)
    study.state_file.state.searches.update(done)
    study.pretrained = PretrainedWithoutTrials(plan, SimpleNamespace(info=DIGITS), out, study.state_file, None)
    stages, _ = study._stages()
    return {s.label: s.needs for s in stages}


def test_results_show_each_candidates_mean_and_spread(repo_root, tmp_path):
    plan = _plan(repo_root, *ROBUST)
    ledger, _ = run(plan, _stages(plan), lucky_at_the_top)
    picked = ledger.selected["candidates-scratch"][0]
    state = StudyState(searches={
        "candidates-scratch": SearchRecord([SelectedTrial(picked, None)], candidates=ledger.candidates[
            "candidates-scratch"])})
    doc = results_document(plan, state, [])
    assert doc["selection"]["top_k"] == 3 and doc["selection"]["seeds"] == [2000, 2001]
    [first, second, third] = doc["candidates"]["scratch"]
    assert set(first) >= {"config", "seeds", "val_acc_per_seed", "mean", "std", "picked"}
    assert second["picked"] and not first["picked"] and not third["picked"]
    write_results(tmp_path, {**doc, "summary": {}}, [])
    md = (tmp_path / "results.md").read_text()
    assert "Seed-robust selection" in md and "0.9500 ± 0.0000" in md and "✓" in md
    assert candidate_lines(None) == []
    assert "candidates" not in results_document(_plan(repo_root), StudyState(), [])

