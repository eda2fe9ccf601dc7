"""Selection: the validation-best checkpoint of the usable trials, by the search's metric and mode."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from sptune.errors import RuntimeFailure
from sptune.judging.selection import select_best, select_each
from sptune.plan.study_plan import build_plan
from sptune.spec import load_spec
from sptune.tasks.base import TaskInfo


def _trial(trial_id: str, scores: list[float], seed: int = 0, diverged: bool = False,
           losses: list[float] | None = None) -> SimpleNamespace:
    losses = losses or scores
    kept = [(SimpleNamespace(path=f"/{trial_id}/{e}"), {"val_acc": s, "val_loss": loss, "epoch": e})
            for e, (s, loss) in enumerate(zip(scores, losses, strict=True), 1)]
    metrics = {"trial_id": trial_id, "training_iteration": len(scores), "diverged": int(diverged),
               "experiment_tag": f"{trial_id.rsplit('_', 1)[-1].lstrip('0') or 0}_lr=0.001"}
    return SimpleNamespace(error=None, metrics=metrics, config={"lr": 1e-3, "seed": seed}, best_checkpoints=kept)


@pytest.fixture
def search(repo_root):
    spec = load_spec(Path(repo_root) / "search_spaces" / "digits_quick.yaml", [])
    plan = build_plan(spec, TaskInfo("digits", "continuous", 64, 10, levels=17), cluster_cpus=2)
    return plan.variant_searches()[0]


def test_max_mode_picks_the_highest_epoch_of_any_usable_trial(search):
    grid = [_trial("a", [0.5, 0.7, 0.6]), _trial("b", [0.65, 0.68]), _trial("c", [0.99], diverged=True)]
    best = select_best(grid, search)
    assert (best.trial_id, best.epoch, best.score, best.checkpoint_path) == ("a", 2, 0.7, "/a/2")
    assert (best.n_trials, best.n_diverged, best.n_failed, best.trial_epochs) == (3, 1, 0, 6)


def test_min_mode_picks_the_lowest(search):
    pretraining_like = replace(search, metric="best_val_loss", mode="min")
    best = select_best([_trial("a", [0.5, 0.3]), _trial("b", [0.4, 0.2, 0.25])], pretraining_like)
    assert (best.trial_id, best.epoch) == ("b", 2)


def test_each_trial_its_own_best_epoch_in_seed_order(search):
    picked = select_each([_trial("s1", [0.5, 0.4], seed=1), _trial("s0", [0.3, 0.6], seed=0)], search)
    assert [(p.trial_id, p.epoch) for p in picked] == [("s0", 2), ("s1", 1)]


def test_nothing_usable_names_the_search(search):
    with pytest.raises(RuntimeFailure, match="search-scratch: no trial finished"):
        select_best([_trial("a", [0.9], diverged=True)], search)


def test_tied_accuracy_goes_to_the_lower_loss_then_the_earlier_epoch(search):
    best = select_best([_trial("x_00000", [0.7, 0.7, 0.7], losses=[0.5, 0.4, 0.4])], search)
    assert best.epoch == 2  # 0.4 beats 0.5; epoch 2 ties epoch 3 and is earlier


def test_tied_trials_go_to_the_lower_trial_index_whatever_the_order(search):
    a, b = _trial("x_00003", [0.7], losses=[0.3]), _trial("x_00001", [0.7], losses=[0.3])
    assert select_best([a, b], search).trial_id == select_best([b, a], search).trial_id == "x_00001"


def test_failures_tune_retried_are_summed_but_never_decide(search):
    """A trial that failed and was retried (Tune's num_failures) is still selectable; a lost one is not."""
    retried, lost = _trial("a", [0.5, 0.7]), _trial("b", [0.9])
    retried.failures, lost.failures, lost.error = 2, 3, "node died"
    best = select_best([retried, lost, _trial("c", [0.6])], search)
    assert (best.trial_id, best.n_failures, best.n_failed) == ("a", 5, 1)
    assert select_best([_trial("c", [0.6])], search).n_failures == 0  # a Tune Result carries no count


def test_a_selection_carries_what_its_own_trial_trained(search):
    # The budget tables count the tested trial's own iterations, steps and seconds, not the search's sum.
    a, b = _trial("a", [0.5, 0.7, 0.6]), _trial("b", [0.65, 0.68])
    a.metrics.update(time_total_s=12.5, optimizer_steps=120)
    best = select_best([a, b], search)
    assert best.trial_totals == {"iterations": 3, "seconds": 12.5, "optimizer_steps": 120}
    assert best.trial_epochs == 5  # the search's trial-epochs, as before
    assert [s.trial_totals["iterations"] for s in select_each([a, b], search)] == [3, 2]
