"""Which seeds each look of sequential re-runs trains (`rerun_sequential`), from what was selected before.

Every look of a variant's re-runs is a stage (`sptune.judging.stage_graph`: rerun-spt, rerun-spt-look2, ...) that
waits for the look before, of the variant and of every variant it is compared with. Once released, it trains its
seeds only if a comparison the variant is in (its own Δ vs its baseline, or another variant's Δ vs it: the baseline
keeps getting seeds while any variant paired with it is undecided) is still undecided after the look before; else
it trains nothing and is selected at once. The decision is derived from the stored per-seed validation scores of the
looks' selections (`sptune.judging.sequential.comparison`), so a resumed study re-derives the same one, and the
test split is never read before the final evaluation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from sptune.judging.pairing import pairings
from sptune.judging.selection import Selection
from sptune.judging.sequential import (
    FIXED_N_RULE,
    SEQUENTIAL_RULE,
    Look,
    SequentialDesign,
    comparison,
    fixed_n,
    look_at,
    verdict,
)
from sptune.plan.study_plan import StudyPlan


@dataclass(frozen=True)
class LookRule:
    """The study's sequential design, its comparisons (variant, the variant its Δ is against) and each variant's
    look labels in order."""

    design: SequentialDesign
    seeds: tuple[str, ...]  # every re-run seed, in the order looks add them
    comparisons: tuple[tuple[str, str], ...]
    labels: tuple[tuple[str, tuple[str, ...]], ...]  # variant -> its looks' stage labels

    def look_labels(self, variant: str) -> tuple[str, ...]:
        return dict(self.labels)[variant]

    def partners(self, variant: str) -> list[tuple[str, str]]:
        """The comparisons ``variant`` is in, as the variant or as the one compared against."""
        return [pair for pair in self.comparisons if variant in pair]

    def scores(self, variant: str, selected: Mapping[str, Sequence[Selection]]) -> dict[str, float]:
        """seed -> the validation score of the variant's re-run with that seed, over its looks selected so far."""
        return {
            str(s.config["seed"]): float(s.score)
            for label in self.look_labels(variant)
            for s in selected.get(label, ())
        }

    def status(
        self, variant: str, baseline: str, selected: Mapping[str, Sequence[Selection]], upto: int | None = None
    ) -> Look:
        """The comparison on validation scores after look ``upto`` (from 0; None: the last)."""
        return comparison(
            self.scores(variant, selected), self.scores(baseline, selected), self.seeds, self.design, upto
        )

    def wants(self, variant: str, look: int, selected: Mapping[str, Sequence[Selection]]) -> bool:
        """Look ``look`` (from 1) of ``variant`` trains its seeds: the first always; a later one while a comparison
        the variant is in is undecided after the look before."""
        return look == 1 or any(not self.status(a, b, selected, look - 2).decided for a, b in self.partners(variant))


def look_rule(plan: StudyPlan) -> LookRule | None:
    """The study's rule; None without `rerun_sequential`."""
    q = plan.spec.rerun_sequential
    if q is None:
        return None
    spec = plan.spec
    kinds = {name: spec.variant_kind(name) for name in spec.variants}
    pairs = tuple((v, p.baseline) for v, p in pairings(kinds, spec.baseline, spec.pretrain_objective).items())
    labels = tuple((s.variant, tuple(plan.rerun_labels(s))) for s in plan.variant_searches())
    design = SequentialDesign(plan.rerun_looks(), q.alpha, q.effect, q.spending)
    return LookRule(design, tuple(map(str, plan.rerun_seeds())), pairs, labels)


def _test_look(rule: LookRule, stop: Look, test: Mapping[str, float], base: Mapping[str, float]) -> Look:
    """The test Δ at the look the comparison ended (on validation), over the seeds of that look both have: its
    repeated interval holds whatever look the validation Δ stopped at, and its verdict is final (no more looks)."""
    k = stop.look - 1
    paired = [s for s in rule.seeds[: rule.design.looks[k]] if s in test and s in base]
    found = look_at([test[s] - base[s] for s in paired], rule.design, k, paired)
    return replace(found, verdict=verdict(found.interval, rule.design.effect, last=True))


def design_document(design: SequentialDesign) -> dict[str, Any]:
    """results.json's `sequential.design`: the looks, the z-boundaries and the error spent by each look."""
    spent = [design.spent_by(k) for k in range(len(design.looks))]
    return {
        "looks": list(design.looks),
        "alpha": design.alpha,
        "effect": design.effect,
        "spending": design.spending,
        "z_boundaries": list(design.z_bounds),
        "alpha_spent": spent,
        "rule": SEQUENTIAL_RULE,
        "fixed_n_rule": FIXED_N_RULE,
    }


def sequential_document(
    rule: LookRule, selected: Mapping[str, Sequence[Selection]], test: Mapping[str, Mapping[str, float]]
) -> dict[str, Any]:
    """results.json's `sequential`: the design and, per compared variant, where its comparison stopped on validation
    (`stopped`), the test Δ at that look (`test`: both intervals and the boundary), its verdict, the seeds it used
    and the fixed-N design's seeds for the same effect at the test Δs' spread. `test`: variant -> seed -> test acc."""
    comparisons = {}
    for variant, baseline in rule.comparisons:
        stop = rule.status(variant, baseline, selected)
        at_test = _test_look(rule, stop, test.get(variant, {}), test.get(baseline, {}))
        comparisons[variant] = {
            "vs": baseline,
            "verdict": at_test.verdict,
            "seeds_used": len(rule.scores(variant, selected)),
            "max_seeds": rule.design.max_seeds,
            "stopped": stop.to_json(),
            "test": at_test.to_json(),
            "fixed_n": fixed_n(at_test.sd, rule.design.effect, rule.design.alpha),
        }
    return {"design": design_document(rule.design), "comparisons": comparisons}
