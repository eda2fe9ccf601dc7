"""LR ranges that bracket the optimum (`search.lr.extend: true`): a selected LR at a bound of its search adds
LRs beyond it, half a decade per round, up to `lr_extend.max_rounds`; each round's trials train to the end
with the selected config's other values and fresh seeds of the search's range, and the pick is selected again
over the search and the added trials. Checked on the arithmetic, the spec, the study's staged searcher (no Ray,
any finish order), the plan, the state, results and the report's edge flag."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace

import pytest

from sptune.errors import SpecError
from sptune.judging.results import write_results
from sptune.judging.stage_graph import variant_stages
from sptune.plan.cost import stage_epochs
from sptune.plan.dry_run_text import describe
from sptune.plan.study_plan import build_plan
from sptune.report.flags import flag_lr_edge
from sptune.report.records import ReportData
from sptune.rules import seeds
from sptune.rules.lr_extension import extension_lrs, extension_record, round_trials
from sptune.spec import ParamSpace, apply_override, from_dict, read_yaml
from sptune.study.publish import results_document
from sptune.study.state import SearchRecord, SelectedTrial, StudyState
from tests.helpers_staged import DIGITS, run
from tests.helpers_tiny import PLAIN_PICK

# The seeded draws put the search's best LR (peaks above 4e-3) at 3.89e-3, within 1.5x of the top.
EXTEND = ["variants.scratch.search.lr={type: loguniform, low: 0.001, high: 0.005, extend: true}"]


def _plan(repo_root: str, *overrides: str):
    """digits_quick with scratch alone (no pretraining), FIFO and random draws."""
    data = read_yaml(Path(repo_root) / "search_spaces" / "digits_quick.yaml")
    plain = [*PLAIN_PICK, "lr_extend.max_rounds=2", "variants.scratch.search.lr.extend=false"]  # the defaults
    for assignment in ("pretrain=null", "variants.spt=null", "variants.scratch.num_samples=5", "rerun_seeds=2",
                       "scheduler.type=fifo", "searcher.type=random", *plain, *overrides):
        apply_override(data, assignment)
    data["variants"] = {k: v for k, v in data["variants"].items() if v is not None}
    return build_plan(from_dict(data), DIGITS, cluster_cpus=2)


def _stages(plan):
    return variant_stages(plan, plan.variant_searches()[0], tuple(plan.rerun_seeds()), None)


def peak_at(best_lr: float):
    """Validation accuracy falling with the log-distance from `best_lr`, whatever the seed."""
    def score(config: dict) -> tuple[float, bool]:
        return round(0.95 - 0.1 * abs(math.log10(float(config["lr"]) / best_lr)), 6), False
    return score


def _stage_configs(configs: dict) -> dict[str, list[dict]]:
    found: dict[str, list[dict]] = {}
    for config in configs.values():
        found.setdefault(config["stage"], []).append(config)
    return found


# ------------------------------------------------------------------ the arithmetic


def test_a_range_extends_half_a_decade_per_round_from_the_bound_its_pick_sits_at():
    space = ParamSpace(type="loguniform", low=1e-4, high=1e-2)
    assert extension_lrs(space, 8.1e-3, 1) == [0.01778, 0.03162]  # within 1.5x of the top: up
    assert extension_lrs(space, 1.4e-4, 1) == [5.623e-05, 3.162e-05]  # within 1.5x of the bottom: down
    assert extension_lrs(space, 1e-3, 1) == [] and extension_lrs(space, 6e-3, 1) == []
    assert extension_lrs(space, 0.03162, 2) == [0.05623, 0.1]  # still at the (new) edge: one more round
    assert extension_lrs(space, 0.01778, 2) == [] and extension_lrs(space, 8.1e-3, 2) == []
    assert round_trials(space) == 2


def test_a_grid_extends_at_its_own_spacing_and_a_fine_grid_at_a_tenth_of_a_decade():
    grid = ParamSpace(type="grid", values=[1e-4, 3e-4, 1e-3, 3e-3])
    assert extension_lrs(grid, 3e-3, 1) == [0.009] and extension_lrs(grid, 0.009, 2) == [0.027]
    assert extension_lrs(grid, 1e-4, 1) == [3.333e-05] and extension_lrs(grid, 1e-3, 1) == []
    decade = ParamSpace(type="choice", values=[1e-4, 1e-3, 1e-2])
    assert extension_lrs(decade, 1e-2, 1) == [0.03162]  # spacing above half a decade: half a decade
    fine = ParamSpace(type="grid", values=[1e-3, 1.01e-3, 1.02e-3])
    assert len(extension_lrs(fine, 1.02e-3, 1)) == 5 == round_trials(fine)


def test_the_record_says_what_was_added_and_whether_the_pick_is_still_at_the_edge():
    space = ParamSpace(type="loguniform", low=1e-4, high=1e-2)
    inside = extension_record(space, [[1e-3], [1e-3], [1e-3]], 2)
    assert inside["rounds"] == 0 and inside["added_lrs"] == [] and not inside["final_at_edge"]
    settled = extension_record(space, [[8.1e-3], [0.01778], [0.01778]], 2)
    assert settled["rounds"] == 1 and settled["added_lrs"] == [[0.01778, 0.03162]] and settled["side"] == "high"
    assert settled["searched_range"] == [1e-4, 0.03162] and not settled["final_at_edge"]
    limit = extension_record(space, [[8.1e-3], [0.03162], [0.1]], 2)
    assert limit["rounds"] == 2 and limit["final_lr"] == 0.1 and limit["final_at_edge"]
    assert limit["original"] == {"low": 1e-4, "high": 1e-2}


def test_extension_seeds_stay_in_the_search_range_above_every_grid_repeat():
    assert seeds.search_seeds(3, seeds.MAX_GRID_REPEATS)[-1] < seeds.extension_seeds(3, 0, 1)[0]
    assert seeds.extension_seeds(3, 0, seeds.MAX_EXTENSION_TRIALS)[-1] < seeds.rerun_seeds(3, 1)[0]
    with pytest.raises(ValueError):
        seeds.extension_seeds(3, seeds.MAX_EXTENSION_TRIALS, 1)


# ------------------------------------------------------------------ the spec


@pytest.mark.parametrize("overrides, field", [
    (["variants.scratch.search.batch_size.extend=true"], "variants.scratch.search.batch_size.extend"),
    (["variants.scratch.search.lr={type: grid, values: [0.001], extend: true}"], "variants.scratch.search.lr.extend"),
    (["lr_extend.max_rounds=7"], "lr_extend.max_rounds"),
])
def test_extend_is_the_lr_searchs_only_and_limited(repo_root, overrides, field):
    with pytest.raises(SpecError) as refused:
        _plan(repo_root, *overrides)
    assert refused.value.where == field


def test_a_pretraining_never_extends(repo_root):
    data = read_yaml(Path(repo_root) / "search_spaces" / "digits_quick.yaml")
    apply_override(data, "pretrain.search.lr.extend=true")
    with pytest.raises(SpecError) as refused:
        from_dict(data)
    assert refused.value.where == "pretrain.search.lr.extend"


# ------------------------------------------------------------------ the stages


def test_rounds_add_lrs_until_the_pick_is_inside_and_the_reruns_train_it(repo_root):
    plan = _plan(repo_root, *EXTEND)
    ledger, configs = run(plan, _stages(plan), peak_at(0.009))
    by_stage = _stage_configs(configs)
    best_searched = max(by_stage["search-scratch"], key=lambda c: c["lr"])
    assert ledger.selected["search-scratch"][0].config["lr"] == best_searched["lr"] == pytest.approx(3.89e-3, 1e-3)
    added = by_stage["extend-scratch-1"]
    assert [(c["lr"], c["seed"], c["phase"]) for c in added] == [(0.008891, 900, "extend"), (0.01581, 901, "extend")]
    assert all(c["batch_size"] == best_searched["batch_size"] for c in added)  # the pick's other values
    assert "extend-scratch-2" not in by_stage  # 0.008891 is inside: the second round adds nothing
    assert ledger.selected["extend-scratch-2"][0].config["lr"] == 0.008891
    assert [(c["lr"], c["seed"]) for c in by_stage["rerun-scratch"]] == [(0.008891, 1000), (0.008891, 1001)]


def test_a_candidate_at_the_edge_extends_the_range_though_the_searchs_best_is_inside(repo_root):
    """With top_k candidates any of them may become the pick, so one at a bound extends the range (the
    search's best alone, 2e-3, is inside [1e-3, 4e-3]; its runner-up, 4e-3, is the grid's end)."""
    grid = "variants.scratch.search.lr={type: grid, values: [0.001, 0.002, 0.004], extend: true}"
    plan = _plan(repo_root, grid, "variants.scratch.num_samples=null", "selection.top_k=2", "selection.seeds=2")
    scores = {1e-3: 0.90, 2e-3: 0.95, 4e-3: 0.94}

    def score(config: dict) -> tuple[float, bool]:
        return scores.get(float(config["lr"]), 0.93), False  # beyond the grid: worse than both candidates

    ledger, configs = run(plan, _stages(plan), score)
    by_stage = _stage_configs(configs)
    assert ledger.selected["search-scratch"][0].config["lr"] == 2e-3
    assert [c["lr"] for c in by_stage["extend-scratch-1"]] == [0.008]  # beyond the runner-up's bound
    assert "extend-scratch-2" not in by_stage  # neither candidate is the round's outermost LR
    assert sorted({c["lr"] for c in by_stage["candidates-scratch"]}) == [0.002, 0.004]
    record = extension_record(plan.variant_searches()[0].space.lr, [[2e-3, 4e-3], [2e-3, 4e-3]], 2)
    assert record["rounds"] == 1 and record["added_lrs"] == [[0.008]] and record["side"] == "high"
    assert record["searched_range"] == [1e-3, 0.008] and not record["final_at_edge"]
    assert record["extended_from"] == {"lr": 0.004, "rank": 1}  # the runner-up, not the pick


def test_an_lr_inside_the_range_adds_nothing(repo_root):
    plan = _plan(repo_root, *EXTEND)
    ledger, configs = run(plan, _stages(plan), peak_at(2.5e-3))
    assert {c["stage"] for c in configs.values()} == {"search-scratch", "rerun-scratch"}
    assert ledger.selected["extend-scratch-2"] == ledger.selected["search-scratch"]


def test_the_same_configs_and_picks_in_any_order_at_any_concurrency(repo_root):
    plan = _plan(repo_root, *EXTEND, "selection.top_k=2", "selection.seeds=2")
    runs = []
    for concurrent, order in ((1, 0), (2, 1), (3, 2), (4, 3), (6, 4)):
        ledger, configs = run(plan, _stages(plan), peak_at(1.0), order, concurrent)  # climbs to the limit
        stages = {k: [(c["lr"], c["batch_size"], c["seed"]) for c in v] for k, v in _stage_configs(configs).items()}
        picks = {k: [(s.config["lr"], s.config["seed"]) for s in v] for k, v in ledger.selected.items()}
        runs.append((stages, picks, ledger.candidates))
    assert all(r == runs[0] for r in runs)
    stages, picks, _ = runs[0]
    assert [lr for lr, *_ in stages["extend-scratch-2"]] == [0.02812, 0.05]
    assert picks["extend-scratch-2"][0][0] == 0.05
    # The candidates are the two best over the search and both rounds: the outermost two LRs.
    assert sorted({lr for lr, *_ in stages["candidates-scratch"]}) == [0.02812, 0.05]


# ------------------------------------------------------------------ plan, resume, results, report


def test_the_plan_says_the_search_may_add_trials_and_the_cost_counts_them(repo_root):
    off, on = _plan(repo_root), _plan(repo_root, *EXTEND)
    assert "The extension may add up to 4 trials to scratch's search" in describe(on)
    assert "extend:" not in describe(off)
    assert stage_epochs(on).finetune - stage_epochs(off).finetune == 4 * on.variant_searches()[0].epochs
    assert "Total: 11 trials" in describe(on) and "Total: 7 trials" in describe(off)
    switched_off = _plan(repo_root, *EXTEND, "lr_extend.max_rounds=0")  # one switch for the whole study
    assert "extend:" not in describe(switched_off) and [s.label for s in _stages(switched_off)] == [
        "search-scratch", "rerun-scratch"]


def test_a_resumed_study_continues_with_the_rounds_left(repo_root):
    plan = _plan(repo_root, *EXTEND)
    ledger, _ = run(plan, _stages(plan), peak_at(1.0))
    done = {label: [ledger.selected[label][0]] for label in ("search-scratch", "extend-scratch-1")}
    left = [s for s in _stages(plan) if s.label not in done]
    assert [s.label for s in left] == ["extend-scratch-2", "rerun-scratch"]
    resumed, configs = run(plan, left, peak_at(1.0), selections=done)
    assert [c["lr"] for c in configs.values() if c["stage"] == "extend-scratch-2"] == [0.02812, 0.05]
    reruns = [s.config for s in ledger.selected["rerun-scratch"]]
    assert [s.config for s in resumed.selected["rerun-scratch"]] == reruns and reruns[0]["lr"] == 0.05


def _state(ledger) -> StudyState:
    return StudyState(searches={label: SearchRecord([SelectedTrial(picked[0], None)])
                                for label, picked in ledger.selected.items() if not label.startswith("rerun")})


def test_results_say_what_the_extension_did(repo_root, tmp_path):
    plan = _plan(repo_root, *EXTEND)
    ledger, _ = run(plan, _stages(plan), peak_at(0.009))
    doc = results_document(plan, _state(ledger), [])
    entry = doc["lr_extension"]["scratch"]
    assert entry["rounds"] == 1 and entry["added_lrs"] == [[0.008891, 0.01581]] and entry["final_lr"] == 0.008891
    assert entry["original"] == {"low": 1e-3, "high": 5e-3} and not entry["final_at_edge"]
    write_results(tmp_path, {**doc, "summary": {}}, [])
    md = (tmp_path / "results.md").read_text()
    assert "LR extension" in md and "round 1: 0.00889, 0.0158; best LR after it 0.00889, inside the searched" in md
    assert "the search's pick, LR 0.00389, sat at the high bound" in md and entry["extended_from"]["rank"] == 0
    assert "lr_extension" not in results_document(_plan(repo_root), _state(ledger), [])


def _report(lr: float, extension: dict | None) -> ReportData:
    spec = {"variants": {"scratch": {"search": {"lr": {"type": "loguniform", "low": 1e-4, "high": 1e-2}}}}}
    cell = SimpleNamespace(lrs={"1000": lr, "1001": lr})
    data = ReportData("s", Path("."), [], [], spec, [], "results.json",
                      lr_extension={"scratch": extension} if extension else {})
    return flag_lr_edge(data, {("digits", "scratch"): cell})


def test_the_edge_flag_counts_the_extended_range():
    space = ParamSpace(type="loguniform", low=1e-4, high=1e-2)
    assert _report(8.1e-3, None).level == "warn"  # not extended: on the edge
    settled = extension_record(space, [[8.1e-3], [8.1e-3], [8.1e-3]], 2)
    assert settled["rounds"] == 1 and settled["searched_range"] == [1e-4, 0.03162]
    assert _report(8.1e-3, settled).level == "ok"  # LRs above it were tried and lost
    assert _report(0.01778, extension_record(space, [[8.1e-3], [0.01778], [0.01778]], 2)).level == "ok"
    limit = _report(0.1, extension_record(space, [[8.1e-3], [0.03162], [0.1]], 2))
    assert limit.level == "warn" and "after 2 round(s) of LR extension" in limit.items[0]

