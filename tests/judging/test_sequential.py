"""Sequential re-runs' statistics (sptune.judging.sequential): the boundaries spend what the spending function says,
and over thousands of simulated studies the error rate holds under repeated looks while a plain t-interval at every
look does not."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sptune.judging import sequential as sq
from sptune.judging.stats import min_detectable_effect
from sptune.rules.seeds import sequential_looks

# The main job's per-seed Δ (SPT − scratch test accuracy, docs/results/digits_quick/results.json): std 0.0391 over
# seeds 1000–1002.
SEED_SD = 0.04
EFFECT = 0.02
ALPHA = 0.05
STUDIES = 2000


def _design(spending: str = sq.OBRIEN_FLEMING) -> sq.SequentialDesign:
    return sq.SequentialDesign(sequential_looks(3, 15, 3), ALPHA, EFFECT, spending)


def _mc_error(p: float, n: int) -> float:
    return 3 * math.sqrt(p * (1 - p) / n)


def test_looks_end_at_max():
    assert sequential_looks(3, 15, 3) == (3, 6, 9, 12, 15)
    assert sequential_looks(3, 10, 3) == (3, 6, 9, 10)
    assert sequential_looks(4, 4, 1) == (4,)


@pytest.mark.parametrize("spending", sq.SPENDING)
def test_boundaries_spend_what_the_spending_function_says(spending):
    """Brownian motion on the information scale: the share first crossing at each look is α(t_k) − α(t_k−1)."""
    design = _design(spending)
    rng = np.random.default_rng(0)
    steps = np.diff((0,) + design.looks)
    paths = (rng.standard_normal((200_000, len(steps))) * np.sqrt(steps)).cumsum(axis=1)
    crossed = np.abs(paths / np.sqrt(design.looks)) >= np.asarray(design.z_bounds)
    first = np.where(crossed.any(axis=1), crossed.argmax(axis=1), -1)
    cumulative = [sq.spent(n / design.max_seeds, ALPHA, spending) for n in design.looks]
    wanted = np.diff([0.0, *cumulative])
    for k, share in enumerate(wanted):
        assert abs((first == k).mean() - share) < _mc_error(max(share, 1e-4), 200_000) + 2e-4, (k, spending)
    assert cumulative[-1] == pytest.approx(ALPHA)


def test_obrien_fleming_spends_little_early_and_pocock_evenly():
    obf, pocock = _design().z_bounds, _design(sq.POCOCK).z_bounds
    assert obf[0] > 4 > obf[-1] > 1.96  # the last look near the fixed design's z(0.975)
    assert max(pocock) - min(pocock) < 0.1


def _simulate(mean: float, design: sq.SequentialDesign, naive: bool = False, seed: int = 1) -> dict:
    """STUDIES studies of per-seed Δs ~ N(mean, SEED_SD²): the verdict, whether the interval at the look that ended
    each covers ``mean``, and the seeds it used. ``naive``: a plain 95 % t-interval at every look instead."""
    rng = np.random.default_rng(seed)
    verdicts, covered, used = [], [], []
    for diffs in rng.normal(mean, SEED_SD, (STUDIES, design.max_seeds)):
        end = _naive_stop(diffs, design) if naive else sq.stop_look(diffs, design)
        verdicts.append(end.verdict)
        covered.append(end.interval[0] <= mean <= end.interval[1])
        used.append(end.n)
    verdicts = np.asarray(verdicts)
    return {v: float((verdicts == v).mean()) for v in sq.VERDICTS} | {
        "coverage": float(np.mean(covered)),
        "seeds": float(np.mean(used)),
    }


def _naive_stop(diffs: np.ndarray, design: sq.SequentialDesign) -> sq.Look:
    """Peeking: the plain t-interval at each look, stopping at the first that decides."""
    for k, n in enumerate(design.looks):
        look = sq.look_at(diffs[:n], design, k)
        plain = sq.verdict(look.t_interval, design.effect, k == len(design.looks) - 1)
        if plain != sq.CONTINUE:
            return sq.Look(k + 1, n, (), look.mean, look.sd, None, look.t_interval, look.t_interval, plain, 0.0)
    raise AssertionError("the last look always ends")


@pytest.mark.parametrize("spending", sq.SPENDING)
def test_error_rate_and_coverage_hold_under_repeated_looks(spending):
    design = _design(spending)
    fixed = sq.fixed_n(SEED_SD, EFFECT, ALPHA)
    null = _simulate(0.0, design)
    print(
        f"\n{spending}: looks {design.looks}, alpha {ALPHA}, effect {EFFECT}, per-seed Δ std {SEED_SD}; "
        f"fixed-N design: {fixed} seeds"
    )
    print(
        f"  mean 0: false positives {null['better'] + null['worse']:.4f}, equivalent {null['equivalent']:.4f}, "
        f"coverage {null['coverage']:.4f}, expected seeds {null['seeds']:.2f}"
    )
    assert null["better"] + null["worse"] <= ALPHA + _mc_error(ALPHA, STUDIES)
    assert null["coverage"] >= 1 - ALPHA - _mc_error(ALPHA, STUDIES)
    for mean in (2 * EFFECT, -2 * EFFECT):
        found = _simulate(mean, design, seed=2)
        right, wrong = (sq.BETTER, sq.WORSE) if mean > 0 else (sq.WORSE, sq.BETTER)
        print(
            f"  mean {mean:+.2f}: decided {right} {found[right]:.4f}, {wrong} {found[wrong]:.4f}, undecided "
            f"{found['undecided']:.4f}, coverage {found['coverage']:.4f}, expected seeds {found['seeds']:.2f} "
            f"(fixed-N: {fixed} for the effect, {sq.fixed_n(SEED_SD, abs(mean), ALPHA)} for {abs(mean):.2f})"
        )
        assert found["coverage"] >= 1 - ALPHA - _mc_error(ALPHA, STUDIES)
        assert found[wrong] <= ALPHA / 2 + _mc_error(ALPHA / 2, STUDIES)
        assert found[right] > 0.5  # a true Δ of 2 × effect = one seed-std is found more often than not
        assert found["seeds"] < design.max_seeds


def test_peeking_with_a_plain_t_interval_inflates_the_error_rate():
    """What the boundaries prevent, and proof that the simulation can see it: stopping at the first look whose plain
    95 % t-interval excludes 0 makes far more than 5 % false positives."""
    null = _simulate(0.0, _design(), naive=True)
    print(f"\nplain t-interval at each look: false positives {null['better'] + null['worse']:.4f}")
    assert null["better"] + null["worse"] > ALPHA + _mc_error(ALPHA, STUDIES)


def test_verdicts():
    assert sq.verdict((0.01, 0.2), 0.05, False) == sq.BETTER
    assert sq.verdict((0.001, 0.004), 0.05, False) == sq.BETTER  # a direction first, even inside ±effect
    assert sq.verdict((-0.2, -0.01), 0.05, True) == sq.WORSE
    assert sq.verdict((-0.04, 0.04), 0.05, False) == sq.EQUIVALENT
    assert sq.verdict((-0.06, 0.04), 0.05, False) == sq.CONTINUE
    assert sq.verdict((-0.06, 0.04), 0.05, True) == sq.UNDECIDED
    assert sq.verdict(None, 0.05, True) == sq.UNDECIDED


def test_comparison_pairs_the_seeds_of_each_look_and_skips_missing_ones():
    design = sq.SequentialDesign((3, 5), 0.05, 0.001)
    seeds = ["1000", "1001", "1002", "1003", "1004"]
    values = {"1000": 0.9, "1001": 0.92, "1002": 0.91, "1003": 0.95, "1004": 0.9}
    base = {"1000": 0.1, "1001": 0.12, "1002": 0.1, "1004": 0.1}  # 1003 diverged for the baseline
    first = sq.comparison(values, base, seeds, design, upto=0)
    assert (first.look, first.n, first.seeds, first.verdict) == (1, 3, ("1000", "1001", "1002"), sq.BETTER)
    near = {s: b + d for (s, b), d in zip(base.items(), (0.01, -0.02, 0.0, 0.015), strict=True)}
    end = sq.comparison(near, base, seeds, design)
    assert (end.look, end.n, end.seeds, end.verdict) == (2, 4, ("1000", "1001", "1002", "1004"), sq.UNDECIDED)
    assert end.t_interval[0] > end.interval[0] and end.t_interval[1] < end.interval[1]


def test_fixed_n_is_where_the_smallest_detectable_delta_reaches_the_effect():
    n = sq.fixed_n(SEED_SD, EFFECT, ALPHA)
    assert min_detectable_effect(SEED_SD, n) <= EFFECT < min_detectable_effect(SEED_SD, n - 1)
    assert sq.fixed_n(0.0, EFFECT, ALPHA) == 2 and sq.fixed_n(None, EFFECT, ALPHA) is None


def test_the_spec_offers_exactly_the_spending_functions_there_are():
    from typing import get_args

    from sptune.spec.reruns import SequentialRerunSpec

    assert set(get_args(SequentialRerunSpec.model_fields["spending"].annotation)) == set(sq.SPENDING)
