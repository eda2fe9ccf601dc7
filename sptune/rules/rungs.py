"""The arithmetic of synchronous halving and Hyperband: rungs, rung sizes, brackets, trial-epochs.

Pure Python (no Ray), so the spec's rules, the printed plan and the schedulers all use the same
numbers: what `sptune.plan.dry_run_text.describe` prints is what `sptune.tuning.schedulers.halving` /
`sptune.tuning.schedulers.hyperband` spend when no trial diverges or fails (a trial that does ends sooner, so the
numbers are upper bounds).
"""

from __future__ import annotations

import math


def rung_epochs(grace_period: int, reduction_factor: float, max_t: int) -> list[int]:
    """The epochs where trials are compared: grace·η^k below max_t (at max_t every trial ends)."""
    rungs, k = [], 0
    while (epoch := int(round(grace_period * reduction_factor**k))) < max_t:
        if not rungs or epoch > rungs[-1]:
            rungs.append(epoch)
        k += 1
    return rungs


def rung_sizes(n_trials: int, reduction_factor: float, n_rungs: int) -> list[int]:
    """How many trials train up to each rung and then to the end: n, ⌈n/η⌉, ⌈⌈n/η⌉/η⌉, ...
    (n_rungs + 1 numbers). A rung keeps ⌈entered/η⌉ of the trials that entered it, so with
    no failures these are exact."""
    sizes = [n_trials]
    for _ in range(n_rungs):
        sizes.append(math.ceil(sizes[-1] / reduction_factor))
    return sizes


def halving_epochs(n_trials: int, rungs: list[int], reduction_factor: float, max_t: int) -> int:
    """Trial-epochs one bracket of synchronous halving spends: each trial trains from one rung
    to the next while it survives, the last rung's survivors to max_t."""
    sizes = rung_sizes(n_trials, reduction_factor, len(rungs))
    stops = [*rungs, max_t]
    return sum(size * (stop - start) for size, stop, start in zip(sizes, stops, [0, *rungs], strict=True))


def hyperband_brackets(grace_period: int, reduction_factor: float, max_t: int) -> list[list[int]]:
    """Hyperband's brackets, most aggressive first: bracket k is synchronous halving over the
    rungs of `sha` from the k-th on (it starts its trials with grace·η^k epochs); the last one
    has no rung (its trials train to max_t, a plain random search), as in Li et al. (2018)."""
    rungs = rung_epochs(grace_period, reduction_factor, max_t)
    return [rungs[k:] for k in range(len(rungs) + 1)]


def bracket_trials(n_trials: int, reduction_factor: float, n_brackets: int) -> list[int]:
    """Split a variant's trial budget across its brackets, most aggressive first.

    Li et al. give bracket s (s halvings) n_s ∝ η^s / (s + 1) trials, so that every bracket
    spends about the same epochs; here the shares of `n_trials` follow those weights, each
    bracket gets at least one trial, and rounding goes by largest remainder, ties in the
    more aggressive bracket's favour: the same budget always gives the same split.
    """
    if n_trials < n_brackets:
        raise ValueError(f"{n_trials} trials cannot fill {n_brackets} brackets")
    weights = [reduction_factor ** (n_brackets - 1 - k) / (n_brackets - k) for k in range(n_brackets)]
    shares = [n_trials * w / sum(weights) for w in weights]
    counts = [max(1, math.floor(share)) for share in shares]
    while sum(counts) > n_trials:  # the minimum of one pushed the sum over: take from the most over-served
        k = max((k for k in range(n_brackets) if counts[k] > 1), key=lambda k: (counts[k] - shares[k], k))
        counts[k] -= 1
    while sum(counts) < n_trials:
        k = max(range(n_brackets), key=lambda k: (shares[k] - counts[k], -k))
        counts[k] += 1
    return counts


def hyperband_plan(
    n_trials: int, grace_period: int, reduction_factor: float, max_t: int
) -> list[tuple[int, list[int]]]:
    """(trials, rungs) per bracket, most aggressive first."""
    brackets = hyperband_brackets(grace_period, reduction_factor, max_t)
    counts = bracket_trials(n_trials, reduction_factor, len(brackets))
    return list(zip(counts, brackets, strict=True))


def planned_epochs(kind: str, n_trials: int, grace_period: int, reduction_factor: float, max_t: int) -> int:
    """The most trial-epochs a search of `n_trials` trials of `max_t` epochs spends under a
    scheduler kind (sha and hyperband: exactly this without failures; asha and fifo: n·max_t)."""
    if kind == "sha":
        return halving_epochs(n_trials, rung_epochs(grace_period, reduction_factor, max_t), reduction_factor, max_t)
    if kind == "hyperband":
        return sum(
            halving_epochs(n, rungs, reduction_factor, max_t)
            for n, rungs in hyperband_plan(n_trials, grace_period, reduction_factor, max_t)
        )
    return n_trials * max_t


def describe_bracket(n_trials: int, rungs: list[int], reduction_factor: float, max_t: int, unit: str = "epoch") -> str:
    """e.g. "9 → 3 → 1 trials to epochs 2 → 6 → 8 (32 trial-epochs)"; `unit`: what an iteration is (epoch, round)."""
    sizes = rung_sizes(n_trials, reduction_factor, len(rungs))
    epochs = halving_epochs(n_trials, rungs, reduction_factor, max_t)
    return (
        f"{' → '.join(map(str, sizes))} trial{'s' if n_trials > 1 else ''} to {unit}s "
        f"{' → '.join(map(str, [*rungs, max_t]))} ({epochs} trial-{unit}s)"
    )


def describe_rungs(kind: str, n_trials: int, grace_period: int, reduction_factor: float, max_t: int,
                   unit: str = "epoch") -> str:
    """One line for the plan: the rung sizes of sha, or each bracket of hyperband."""
    if kind == "sha":
        rungs = rung_epochs(grace_period, reduction_factor, max_t)
        return f"halving: {describe_bracket(n_trials, rungs, reduction_factor, max_t, unit)}"
    plan = hyperband_plan(n_trials, grace_period, reduction_factor, max_t)
    parts = [f"[{describe_bracket(n, rungs, reduction_factor, max_t, unit)}]" for n, rungs in plan]
    total = planned_epochs(kind, n_trials, grace_period, reduction_factor, max_t)
    return f"hyperband, {len(plan)} brackets: {' '.join(parts)} = {total} trial-{unit}s"
