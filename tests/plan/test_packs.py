"""sptune.plan.packs: the dry run's packs per search and the cost's member-epochs and pack steps."""

from __future__ import annotations

from pathlib import Path

from sptune.plan.cost import describe_cost, stage_epochs
from sptune.plan.dry_run_text import describe
from sptune.plan.packs import all_packs, halving_pack_epochs, rerun_packs, search_pack_epochs, selection_packs
from sptune.plan.study_plan import build_plan
from sptune.spec import apply_override, from_dict, read_yaml
from sptune.tasks.base import TaskInfo

BASE = Path(__file__).resolve().parents[2] / "search_spaces" / "digits_quick.yaml"
ONE_BATCH = "{type: choice, values: [32]}"


def _plan(*overrides: str):
    data = read_yaml(BASE)
    for assignment in overrides:
        apply_override(data, assignment)
    info = TaskInfo("digits", "continuous", 64, 10, levels=17)
    return build_plan(from_dict(data), info, cluster_cpus=2, train_rows=1258)


def test_without_packing_the_plan_shows_no_packs():
    plan = _plan()
    assert "Packs" not in describe(plan) and "packed:" not in describe_cost(plan)


def test_each_search_packs_per_batch_size_drawn():
    plan = _plan("resources.pack=4")
    packs = {p.label: (p.trials, p.fewest, p.most) for p in all_packs(plan)}
    # digits_quick: 4 pretraining and 6 trials per variant, batch size a choice of 32 or 64.
    assert packs == {"pretrain": (4, 1, 2), "search-scratch": (6, 2, 3), "search-spt": (6, 2, 3)}
    # The most steps: every pack at the smallest batch (32: 40 steps an epoch over 1258 rows, 20 epochs).
    assert [p.pack_steps for p in all_packs(plan)] == [2 * 800, 3 * 800, 3 * 800]
    text = describe(plan)
    assert "Packs (resources.pack: 4)" in text
    assert "search-scratch           6 trials in 2-3 packs (per batch size drawn of [32, 64])" in text


def test_one_batch_size_gives_one_count_and_the_cost_counts_member_epochs_and_pack_steps():
    plan = _plan("resources.pack=4", f"pretrain.search.batch_size={ONE_BATCH}",
                 *(f"variants.{v}.search.batch_size={ONE_BATCH}" for v in ("scratch", "spt")))
    assert [(p.fewest, p.most) for p in all_packs(plan)] == [(1, 1), (2, 2), (2, 2)]
    # 1258 rows at batch 32: 40 steps an epoch, 20 epochs a trial; 5 packs.
    assert [p.pack_steps for p in all_packs(plan)] == [800, 1600, 1600]
    member_epochs = stage_epochs(plan).total
    assert (f"packed: the {member_epochs} trial-epochs are member-epochs; the searches' trials train in at most 5 "
            "packs (at most 4000 pack steps") in describe_cost(plan)


def test_halving_counts_a_pack_while_one_of_its_members_survives():
    # 9 trials in 2 packs, rungs at 2 and 6 of 18 (η 3): 9 → 3 → 1 survivors; 2 packs can hold survivors until the
    # last rung, after it only the one pack of the last survivor trains.
    assert halving_pack_epochs(9, 2, [2, 6], 3, 18) == 2 * 2 + 2 * 4 + 1 * 12
    assert halving_pack_epochs(8, 1, [3, 9, 27], 3, 30) == 30  # one pack: it trains to the end
    assert halving_pack_epochs(3, 3, [], 3, 10) == 30  # no rung: every pack to the end


def test_every_stage_s_packs_are_counted():
    plan = _plan("resources.pack=4")
    pre, scratch, _ = plan.searches
    # Pretraining: 4 trials in at most 2 packs (2 batch sizes), halving 4 → 2 → 1 at epochs 5, 10 of 20.
    assert search_pack_epochs(plan, pre) == 2 * 5 + 2 * 5 + 1 * 10
    # scratch: 6 trials in at most 3 packs, 6 → 3 → 2: 3 packs to epoch 10, then 2.
    assert search_pack_epochs(plan, scratch) == 3 * 5 + 3 * 5 + 2 * 10
    # Its selection: 2 extension rounds of 2 LRs (a pack each, one round after the other) and 2 x 2 candidates.
    assert selection_packs(plan, scratch) == 2 + 1
    assert rerun_packs(plan) == 1  # 3 re-run seeds in one pack of 4
    solo = _plan("resources.pack=1")
    assert (selection_packs(solo, scratch), rerun_packs(solo)) == (2 * 2 + 4, 3)  # a trial each
    asha = _plan("resources.pack=4", "scheduler.type=asha")
    assert search_pack_epochs(asha, asha.searches[1]) == 3 * 20  # no synchronous rungs: every pack to the end
