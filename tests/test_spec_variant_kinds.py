"""The variant kinds table: every list the spec and the builders use is derived from it."""

from __future__ import annotations

from sptune.spec import KINDS, LANGUAGE_MODEL_KINDS, PRETRAINING_OF, VARIANT_KINDS
from sptune.spec.variant_kinds import ATTENTION_ONLY_KINDS


def test_each_kind_is_defined_once_under_its_own_name():
    assert all(name == kind.name for name, kind in KINDS.items())
    assert VARIANT_KINDS == tuple(KINDS) and len(set(VARIANT_KINDS)) == len(VARIANT_KINDS)


def test_derived_lists_follow_the_facts():
    assert LANGUAGE_MODEL_KINDS == ("fpt_frozen", "fpt_unfrozen", "frozen_random", "unfrozen_random")
    assert ATTENTION_ONLY_KINDS == ("qk_init", "frozen_attn", "frozen_attn_mlp")
    assert {k for k, objective in PRETRAINING_OF.items() if objective} == {"spt", "spt_causal", "qk_init", "spt_cross"}
    assert PRETRAINING_OF["spt_causal"] == "causal"


def test_only_kinds_initialised_from_spt_follow_or_cross():
    for kind in KINDS.values():
        if kind.follows_pretrain_objective or kind.cross_task:
            assert kind.pretraining is not None, kind.name
        assert not (kind.language_model and kind.pretraining), kind.name
