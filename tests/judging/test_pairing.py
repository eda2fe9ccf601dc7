"""sptune.judging.pairing: which variant each Δ is against. The study's baseline, unless it trains another model
than the variant (causal vs bidirectional, a language model) and the study has the variant's like-for-like kind."""

from __future__ import annotations

from sptune.judging.pairing import Pairing, baseline_for, pairings

CAUSAL_STUDY = {"scratch": "scratch", "scratch_causal": "scratch_causal", "spt": "spt", "spt_causal": "spt_causal",
                "qk_init": "qk_init"}


def test_a_causal_variant_is_paired_with_the_causal_scratch():
    paired = pairings(CAUSAL_STUDY)
    assert paired["spt_causal"] == Pairing("spt_causal", "scratch_causal", True, "like-for-like: both causal")
    assert paired["spt"] == Pairing("spt", "scratch", True, "like-for-like: both bidirectional")
    assert paired["qk_init"].baseline == "scratch" and "scratch" not in paired  # the baseline has no Δ
    # scratch_causal has no like-for-like kind but itself: its Δ vs scratch is the architecture's effect alone.
    assert paired["scratch_causal"] == Pairing("scratch_causal", "scratch", False,
                                               "not like-for-like: causal vs bidirectional")


def test_without_a_causal_scratch_the_delta_is_kept_and_marked():
    pair = baseline_for("spt_causal", {"scratch": "scratch", "spt_causal": "spt_causal"})
    assert pair == Pairing("spt_causal", "scratch", False, "not like-for-like: causal vs bidirectional")
    assert pair.label == "scratch (not like-for-like: causal vs bidirectional)"


def test_spt_following_the_causal_objective_is_paired_like_spt_causal():
    assert baseline_for("spt", CAUSAL_STUDY, pretrain_objective="causal").baseline == "scratch_causal"
    assert baseline_for("spt", CAUSAL_STUDY, pretrain_objective="masked").baseline == "scratch"


def test_language_models_are_paired_with_the_random_backbone():
    study = {"scratch": "scratch", "fpt_frozen": "fpt_frozen", "unfrozen_random": "unfrozen_random"}
    assert baseline_for("fpt_frozen", study) == Pairing("fpt_frozen", "unfrozen_random", True,
                                                        "like-for-like: both causal language models")
    assert baseline_for("unfrozen_random", study).note == "not like-for-like: causal language model vs bidirectional"
    alone = baseline_for("fpt_frozen", {"scratch": "scratch", "fpt_frozen": "fpt_frozen"})
    assert (alone.baseline, alone.like_for_like) == ("scratch", False)


def test_no_named_baseline_no_delta_even_with_a_causal_scratch():
    # No guessing: without the named baseline nothing has a Δ, as before.
    assert pairings({"sc": "scratch_causal", "c": "spt_causal", "s": "spt"}) == {}


def test_a_named_baseline_of_the_same_model_is_kept():
    study = {**CAUSAL_STUDY, "frozen": "frozen_attn"}
    paired = pairings(study, baseline="frozen")
    assert paired["spt"].baseline == "frozen" and paired["scratch"].baseline == "frozen"
    assert paired["spt_causal"].baseline == "scratch_causal"  # frozen is bidirectional: not like-for-like
    by_causal = pairings(study, baseline="scratch_causal")
    assert by_causal["spt"].baseline == "scratch" and by_causal["spt_causal"].baseline == "scratch_causal"


def test_among_several_causal_scratches_the_one_named_after_the_kind():
    study = {"scratch": "scratch", "sc_long": "scratch_causal", "scratch_causal": "scratch_causal",
             "c": "spt_causal"}
    assert baseline_for("c", study).baseline == "scratch_causal"
    assert baseline_for("c", {k: v for k, v in study.items() if k != "scratch_causal"}).baseline == "sc_long"


def test_kinds_outside_the_table_are_paired_with_the_baseline_and_no_claim():
    pair = baseline_for("mine", {"scratch": "scratch", "mine": "renamed_kind"})
    assert pair == Pairing("mine", "scratch", None, "") and pair.label == "scratch"
