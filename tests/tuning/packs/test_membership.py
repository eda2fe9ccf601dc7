"""Pack membership (sptune.tuning.packs.membership and the staged searcher's pack slots): each stage's trials go
K to a pack in suggestion order, never across a suggestion batch, a pack handed out whole before anything else,
and a new pack only when all of it fits in the free slots."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
from ray.tune.search import Searcher

from sptune.plan.study_plan import build_plan
from sptune.spec import load_spec
from sptune.tuning.packs.membership import PACK_KEY, PackSlot, slot_for, without_pack
from sptune.tuning.tuner import staged_search
from tests.helpers_staged import DIGITS, run

SMALL = ["pretrain.num_samples=4", "variants.scratch.num_samples=6", "variants.spt.num_samples=6",
         "rerun_seeds=3", "scheduler.type=fifo"]


def _plan(repo_root: str, *overrides: str):
    spec = load_spec(Path(repo_root) / "search_spaces" / "digits_quick.yaml", [*SMALL, *overrides])
    return build_plan(spec, DIGITS, cluster_cpus=2)


def test_slots_fill_packs_within_each_suggestion_batch():
    # 6 trials in batches of 4, packs of 3: the first batch makes a pack of 3 and one of 1, the second one of 2.
    assert [slot_for(i, 6, 4, 3) for i in range(6)] == [(0, 0, 3), (0, 1, 3), (0, 2, 3), (1, 0, 1), (2, 0, 2),
                                                         (2, 1, 2)]
    # Unbatched (the batch is the stage): packs of 2 over 5 trials, the last one alone.
    assert [slot_for(i, 5, 5, 2) for i in range(5)] == [(0, 0, 2), (0, 1, 2), (1, 0, 2), (1, 1, 2), (2, 0, 1)]


def test_the_pack_is_left_out_of_what_records_read():
    config = {"lr": 0.1, "stage": "pretrain", PACK_KEY: PackSlot("p/pretrain/0", 1, 3).as_config()}
    assert without_pack(config) == {"lr": 0.1, "stage": "pretrain"}
    assert PackSlot.of(config) == PackSlot("p/pretrain/0", 1, 3)


@pytest.mark.parametrize("order", range(4))
def test_every_stage_trial_is_one_member_of_one_pack_handed_out_whole(repo_root, order):
    # Trials end in another order each time: stages at the same depth (scratch, spt) then compete for the turn.
    plan = _plan(repo_root, "resources.pack=3")
    _, configs = run(plan, _stages(plan), lambda config: (float(config["lr"]), False), order=order, concurrent=6)
    members: dict[str, list[tuple[int, int, str]]] = defaultdict(list)
    order = list(configs)
    for config in configs.values():
        slot = PackSlot.of(config)
        members[slot.name].append((slot.member, slot.size, config["stage"]))
        assert slot.name.split("/")[-2] == config["stage"] and slot.size <= 3
    assert len(order) == sum(len(m) for m in members.values())
    for name, found in members.items():
        size = found[0][1]
        assert sorted(k for k, *_ in found) == list(range(size)), name  # every member once, the pack full
        assert len({stage for *_, stage in found}) == 1
    # Each pack's members were suggested one after another: no other trial between them.
    positions = defaultdict(list)
    for position, config in enumerate(configs.values()):
        positions[PackSlot.of(config).name].append(position)
    assert all(p == list(range(p[0], p[0] + len(p))) for p in positions.values()), positions
    # The searches (Optuna, batches of 4) pack 3 + 1 per batch: never across a batch.
    sizes = sorted(found[0][1] for name, found in members.items() if "/search-scratch/" in name)
    assert sizes == [1, 2, 3], sizes


def test_a_new_pack_starts_only_when_all_of_it_fits(repo_root):
    plan = _plan(repo_root, "resources.pack=3", "searcher.type=random")
    searcher, _ = staged_search(plan, _stages(plan)[:1], {}, {}, None, None, "p")
    searcher.set_max_concurrency(4)
    got = [searcher.suggest(f"t{i}") for i in range(4)]
    # Pretraining's 4 trials: one pack of 3, then the pack of 1 fits (4 slots); a fifth never comes.
    assert [PackSlot.of(c).member for c in got] == [0, 1, 2, 0]
    plan2 = _plan(repo_root, "resources.pack=3", "searcher.type=random", "pretrain.num_samples=6")
    searcher2, _ = staged_search(plan2, _stages(plan2)[:1], {}, {}, None, None, "p")
    searcher2.set_max_concurrency(5)
    first = [searcher2.suggest(f"t{i}") for i in range(3)]
    assert all(isinstance(c, dict) for c in first)
    assert searcher2.suggest("t3") is None  # 2 free slots: the next pack of 3 waits
    searcher2.on_trial_complete("t0", {"val_loss": 1.0})
    assert isinstance(searcher2.suggest("t4"), dict)  # 3 free: it starts
    assert searcher2.suggest("t5") is not Searcher.FINISHED


def _stages(plan):
    from sptune.judging.stage_graph import Stage

    seeds = tuple(plan.rerun_seeds())
    stages = [Stage(p) for p in plan.pretrainings()]
    for search in plan.variant_searches():
        stages += [Stage(search, spt_from=search.init_from), Stage.rerun(search, seeds, search.init_from)]
    return stages


def test_a_pack_being_handed_out_goes_before_another_stage_of_the_same_depth(repo_root):
    # Pretraining and scratch's search alone: the same depth, so the round-robin would alternate between them and
    # leave two packs half started, each member holding a slot while it waits for the rest.
    plan = _plan(repo_root, "resources.pack=3", "searcher.type=random")
    pretrain, scratch = _stages(plan)[:2]
    searcher, _ = staged_search(plan, [pretrain, scratch], {}, {}, None, None, "p")
    got = [searcher.suggest(f"t{i}") for i in range(6)]
    assert [(c["stage"], PackSlot.of(c).member) for c in got] == [
        ("pretrain", 0), ("pretrain", 1), ("pretrain", 2), ("search-scratch", 0), ("search-scratch", 1),
        ("search-scratch", 2)]


def test_mlflow_reads_the_pack_under_the_key_the_searcher_writes_it():
    # Two constants (tracking may not import tuning): a renamed key would log packs as params again.
    from sptune.tracking.mlflow_tracker import PACK_CONFIG_KEY

    assert PACK_CONFIG_KEY == PACK_KEY
