"""The variant kinds table: every list the spec and the builders use is derived from it."""

from __future__ import annotations

from sptune.spec import KINDS, LANGUAGE_MODEL_KINDS, PRETRAINING_OF, VARIANT_KINDS
from sptune.spec.variant_kinds import ARCHITECTURE_OF, ATTENTION_ONLY_KINDS, FROM_SCRATCH, as_built


def test_each_kind_is_defined_once_under_its_own_name():
    assert all(name == kind.name for name, kind in KINDS.items())
    assert VARIANT_KINDS == tuple(KINDS) and len(set(VARIANT_KINDS)) == len(VARIANT_KINDS)


def test_derived_lists_follow_the_facts():
    assert LANGUAGE_MODEL_KINDS == ("fpt_frozen", "fpt_unfrozen", "frozen_random", "unfrozen_random")
    assert ATTENTION_ONLY_KINDS == ("qk_init", "frozen_attn", "frozen_attn_mlp")
    assert {k for k, objective in PRETRAINING_OF.items() if objective} == {"spt", "spt_causal", "spt_frozen", "qk_init",
                                                                           "spt_cross"}
    assert PRETRAINING_OF["spt_causal"] == "causal"


def test_only_kinds_initialised_from_spt_follow_or_cross():
    for kind in KINDS.values():
        if kind.follows_pretrain_objective or kind.cross_task:
            assert kind.pretraining is not None, kind.name
        assert not (kind.language_model and kind.pretraining), kind.name


def test_scratch_causal_is_spt_causals_model_from_random_init():
    scratch_causal, spt_causal = KINDS["scratch_causal"], KINDS["spt_causal"]
    assert scratch_causal.architecture == spt_causal.architecture == "causal"
    assert scratch_causal.pretraining is None and not scratch_causal.language_model
    assert spt_causal.baseline == "scratch_causal" and KINDS["spt"].baseline == "scratch"


def test_every_kind_names_a_like_for_like_baseline_kind():
    """The baseline kind trains the same model from a random init, every parameter training; it is its own."""
    for kind in KINDS.values():
        base = KINDS[kind.baseline]
        assert base.network == kind.network and base.pretraining is None and base.baseline == base.name, kind.name
        if kind.pretraining is not None:  # a causal objective needs the causal model
            assert kind.architecture == ARCHITECTURE_OF[kind.pretraining], kind.name
    assert all(KINDS[k].network == "causal language model" for k in LANGUAGE_MODEL_KINDS)
    assert {k.baseline for k in KINDS.values() if k.architecture == "bidirectional"} == {FROM_SCRATCH["bidirectional"]}


def test_kinds_following_pretrain_objective_take_its_model_and_baseline():
    for name in ("spt", "spt_frozen", "spt_cross"):
        built = as_built(KINDS[name], "causal")
        assert (built.pretraining, built.architecture, built.baseline) == ("causal", "causal", "scratch_causal")
        assert as_built(KINDS[name], "masked") == as_built(KINDS[name], None) == KINDS[name]
    assert as_built(KINDS["qk_init"], "causal") == KINDS["qk_init"]  # its own objective, whatever pretrain says


def test_spt_frozen_is_spts_model_with_spts_baseline():
    """spt_frozen starts from the checkpoint spt starts from, trains the same model, and is paired as spt is:
    against scratch by default (so both Δs share one baseline), against spt when a spec names `baseline: spt`."""
    from sptune.judging.pairing import Pairing, baseline_for

    frozen, spt = KINDS["spt_frozen"], KINDS["spt"]
    for objective in ("masked", "causal", None):
        built, spt_built = as_built(frozen, objective), as_built(spt, objective)
        assert (built.pretraining, built.network, built.baseline) == (spt_built.pretraining, spt_built.network,
                                                                      spt_built.baseline)
    assert not frozen.attention_only and not frozen.language_model and not frozen.cross_task
    study = {"scratch": "scratch", "spt": "spt", "spt_frozen": "spt_frozen"}
    assert baseline_for("spt_frozen", study) == Pairing("spt_frozen", "scratch", True,
                                                        "like-for-like: both bidirectional")
    assert baseline_for("spt_frozen", study, baseline="spt").baseline == "spt"
    causal = {**study, "scratch_causal": "scratch_causal"}
    assert baseline_for("spt_frozen", causal, pretrain_objective="causal").baseline == "scratch_causal"
