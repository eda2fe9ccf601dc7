"""Rules across sections (variants vs pretrain, scheduler, model family, language model) and what
the spec derives from its variants: kinds, objectives and the pretraining runs they share."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from sptune.errors import SpecError
from sptune.spec import (
    SweepSpec,
    apply_override,
    budget_rules,
    from_dict,
    load_spec,
    pack_rules,
    read_yaml,
    reruns,
    sweep_spec,
)

BASE = Path(__file__).resolve().parents[2] / "search_spaces" / "digits_quick.yaml"
GRID = "search: {lr: {type: grid, values: [0.001]}, batch_size: {type: grid, values: [32]}}"


def _spec(*overrides: str) -> SweepSpec:
    data = read_yaml(BASE)
    for assignment in overrides:
        apply_override(data, assignment)
    return from_dict(data)


def _where(*overrides: str) -> str:
    with pytest.raises(SpecError) as caught:
        _spec(*overrides)
    return caught.value.where


@pytest.mark.parametrize(
    "overrides, where",
    [
        (["variants={}"], "variants"),
        (["variants.spt.kind=nope"], "variants.spt.kind"),
        ([f"variants.nope={{{GRID}}}"], "variants.nope"),
        (["variants.spt.source_task={name: listops}"], "variants.spt.source_task"),
        (["variants.spt.kind=spt_cross"], "variants.spt.source_task"),
        (["model.family=ssm", f"variants.fa={{kind: frozen_attn, {GRID}}}"], "variants.fa"),
        (["pretrain=null"], "pretrain"),
        (["pretrain.enabled=false"], "pretrain"),
        ([f"variants.lm={{kind: fpt_frozen, {GRID}}}"], "variants.lm"),
        (["scheduler.grace_period=21"], "scheduler.grace_period"),
        (["scheduler.grace_period=11", "pretrain.epochs=10"], "scheduler.grace_period"),
        (["rerun_seeds=0"], "rerun_seeds"),
        # Synchronous Hyperband: an async Optuna learns nothing; every bracket needs a trial of its own.
        (["scheduler.type=hyperband", "searcher.mode=async"], "searcher.mode"),
        (["scheduler.type=hyperband", "variants.scratch.num_samples=2"], "variants.scratch.num_samples"),
        (["scheduler.type=hyperband", "pretrain.num_samples=2"], "pretrain.num_samples"),
        (["scheduler.type=hyperband", f"variants.g={{kind: scratch, {GRID}}}"], "variants.g.grid_repeats"),
        (["max_failures=-1"], "max_failures"),
        # A pack draws each member's dropout from its own stream outside the fused forward, and is not compiled
        # (it captures its own step: cuda_graphs is accepted below).
        (["resources.pack=4", "model.attention_dropout=0.1"], "resources.pack"),
        (["resources.pack=4", "training.compile=true"], "resources.pack"),
        (["resources.pack=4", "model.family=ssm"], "resources.pack"),  # its mixer's parameters stack nowhere
        (["variants.spt.epochs=0"], "variants.spt.epochs"),
        (["seeds=3"], "seeds"),
        # cls pooling reads position 0, which sees only itself in a causal model: refused, never replaced.
        (["model.pooling=cls", f"variants.c={{kind: spt_causal, {GRID}}}"], "model.pooling"),
        (["model.pooling=cls", f"variants.c={{kind: scratch_causal, {GRID}}}"], "model.pooling"),
        (["model.pooling=cls", "pretrain.objective=causal"], "model.pooling"),  # `spt` follows it: causal
        (["model.pooling=cls", f"variants.lm={{kind: fpt_frozen, {GRID}}}", "language_model.path=/m"],
         "model.pooling"),
    ],
)
def test_refused_at(overrides, where):
    assert _where(*overrides) == where


@pytest.mark.parametrize(
    "overrides",
    [
        ["pretrain=null", "variants.spt.kind=scratch"],  # nothing needs pretraining
        ["scheduler.grace_period=11", "pretrain.epochs=0"],  # a 0-epoch pretraining is no stage
        ["scheduler.type=fifo", "scheduler.grace_period=100"],  # FIFO has no grace period
        ["scheduler.type=hyperband"],  # 3 brackets (rungs 5, 10 of 20 epochs), 4 and 6 trials per search
        # Rung 10 only: 2 brackets; a 0-epoch pretraining trains nothing, so its 2 trials need no bracket.
        ["scheduler.type=hyperband", "scheduler.grace_period=10", "variants.scratch.num_samples=2"],
        ["scheduler.type=hyperband", "pretrain.num_samples=2", "pretrain.epochs=0"],
        ["scheduler.type=hyperband", "searcher.type=random", "searcher.mode=async"],  # random learns nothing anyway
        [f"variants.lm={{kind: fpt_frozen, {GRID}}}", "language_model.path=/models/gpt2"],
        ["model.family=ssm"],
        ["model.pooling=cls"],  # every variant bidirectional
        ["model.pooling=last", f"variants.c={{kind: spt_causal, {GRID}}}"],
        ["pretrain=null", "variants.spt.kind=scratch_causal"],  # a causal model with no pretraining
        ["resources.pack=1", "model.attention_dropout=0.1", "training.compile=true"],  # no pack: nothing to refuse
        ["resources.pack=8"],
        ["resources.pack=8", "training.compile=cuda_graphs"],  # the pack captures its whole step on a GPU
        ["resources.pack=8", "model.attention_kernel=flash"],  # one flash-attn call on the members' folded rows
    ],
)
def test_accepted(overrides):
    assert isinstance(_spec(*overrides), SweepSpec)


def test_objectives_come_from_the_kinds_table():
    spec = _spec("pretrain.objective=causal", f"variants.q={{kind: qk_init, {GRID}}}",
                 f"variants.c={{kind: spt_causal, {GRID}}}")
    # `spt` follows pretrain.objective; qk_init and spt_causal keep their own.
    assert {v: spec.variant_objective(v) for v in spec.variants} == {
        "scratch": None, "spt": "causal", "q": "masked", "c": "causal"}
    assert [s.stage_name for s in spec.pretraining_sources()] == ["pretrain", "pretrain-causal"]
    assert spec.pretraining_objectives() == ["causal", "masked"] and spec.needs_pretraining()


def test_a_cross_task_variant_pretrains_on_its_source_task():
    spec = _spec("variants.spt.kind=spt_cross", "variants.spt.source_task={name: listops, gen_n: 5}")
    source = spec.variant_source("spt")
    assert source.task.name == "listops" and source.stage_name == "pretrain-on-listops-gen_n5"
    assert spec.variant_source("scratch") is None


def test_which_variants_are_causal_comes_from_the_kinds_table():
    spec = _spec(f"variants.sc={{kind: scratch_causal, {GRID}}}", f"variants.c={{kind: spt_causal, {GRID}}}",
                 f"variants.lm={{kind: fpt_frozen, {GRID}}}", "language_model.path=/m")
    assert {v: spec.variant_is_causal(v) for v in spec.variants} == {
        "scratch": False, "spt": False, "sc": True, "c": True, "lm": True}
    assert spec.variant_objective("sc") is None and spec.variant_facts("c").baseline == "scratch_causal"
    causal = _spec("pretrain.objective=causal")  # `spt` follows pretrain.objective: its model and its baseline
    assert causal.variant_is_causal("spt") and causal.variant_facts("spt").baseline == "scratch_causal"


def test_the_cls_refusal_names_the_fix():
    with pytest.raises(SpecError) as caught:
        _spec("model.pooling=cls", f"variants.c={{kind: spt_causal, {GRID}}}")
    assert "variant 'c'" in caught.value.problem and caught.value.fix == "use last or mean pooling for causal models"


def test_a_hyperband_budget_too_small_says_how_many_trials_it_needs():
    with pytest.raises(SpecError) as caught:
        _spec("scheduler.type=hyperband", "variants.spt.num_samples=2")
    text = str(caught.value)
    assert "hyperband over 20 epochs (grace 5, η 2) has 3 brackets, one trial each at least; this search has 2" in text
    assert "give it >= 3 trials" in text and "scheduler.type: sha" in text


# ---------------------------------------------------------------- the rules across sections


def test_every_cross_section_rule_runs_exactly_once():
    defined = [f for module in (sweep_spec, budget_rules, reruns, pack_rules)
               for name, f in inspect.getmembers(module, inspect.isfunction)
               if name.startswith("check_") and f.__module__ == module.__name__]
    assert sorted(f.__name__ for f in sweep_spec.CROSS_CHECKS) == sorted(f.__name__ for f in defined)


def test_the_budget_mode_is_checked_before_the_rules_that_read_a_variants_budget(repo_root):
    """total_matched with a given checkpoint has no pretraining budget to add: said as such, not as whatever a
    rule reading the (unknowable) budget would trip on."""
    order = [f.__name__ for f in sweep_spec.CROSS_CHECKS]
    assert order.index("check_budget_mode") < min(order.index(n) for n in ("check_grace_period",
                                                                          "check_until_converged",
                                                                          "check_hyperband_budget"))
    spec = Path(repo_root) / "search_spaces" / "digits_quick.yaml"
    with pytest.raises(SpecError) as refused:
        load_spec(spec, ["budget=total_matched", "pretrain.checkpoint=/nowhere", "scheduler.grace_period=999"])
    assert "total_matched" in str(refused.value) and "grace_period" not in str(refused.value)
