"""What a variant's selection trains after its search, and what the plan says of it: its LR extension's rounds
(`search.lr.extend`, `sptune.rules.lr_extension`), then seed-robust selection's candidates (`selection: {top_k,
seeds}`): the K best configs each re-trained with M fresh seeds, to the end, the pick the best mean validation
score (`sptune.judging.robust_selection`).

Counted as the most they can train, so the plan's totals and its cost are upper bounds."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from sptune.rules import seeds
from sptune.rules.lr_extension import EDGE_FACTOR, RANGE_POINTS, round_trials
from sptune.spec import SearchSpec, SweepSpec


class Searched(Protocol):
    """What these counts read of a variant's search (`sptune.plan.study_plan.SearchPlan`, which imports this)."""

    variant: str | None
    space: SearchSpec
    epochs: int
    n_trials: int


def candidate_trials(spec: SweepSpec, search: Searched) -> int:
    """A variant's candidate trials: top_k configs (at most its search's trials) x seeds (0 when off)."""
    s = spec.selection
    return min(s.top_k, search.n_trials) * s.seeds if s.enabled else 0


def extension_trials(spec: SweepSpec, search: Searched) -> int:
    """The most trials a variant's LR extension adds: every round, each its most LRs (0 without extend)."""
    return spec.lr_extend.max_rounds * round_trials(search.space.lr) if search.space.lr.extend else 0


def selection_trials(spec: SweepSpec, search: Searched) -> int:
    """The most trials a variant's selection adds to its search."""
    return extension_trials(spec, search) + candidate_trials(spec, search)


def selection_epochs(spec: SweepSpec, search: Searched) -> int:
    """The most trial-epochs (rounds of a steps budget) a variant's selection adds: each trial to the end."""
    return selection_trials(spec, search) * search.epochs


def describe_selection(spec: SweepSpec, variants: Sequence[Searched]) -> tuple[list[str], int, int]:
    """The plan's lines on what the variants' selections add; their trials and trial-epochs (at most)."""
    trials = sum(selection_trials(spec, search) for search in variants)
    epochs = sum(selection_epochs(spec, search) for search in variants)
    return _extension_lines(spec, variants) + _candidate_lines(spec, variants), trials, epochs


def _extension_lines(spec: SweepSpec, variants: Sequence[Searched]) -> list[str]:
    extending = {search.variant: n for search in variants if (n := extension_trials(spec, search))}
    if not extending:
        return []
    rounds, first = spec.lr_extend.max_rounds, spec.seed + seeds.EXTENSION_SEED_OFFSET
    each = ", ".join(f"{n} trials to {name}'s" for name, n in extending.items())
    decades = f"{rounds * 0.5:g} decade{'s' if rounds > 2 else ''}"
    which = (f"selected LR, or the LR of one of its top {spec.selection.top_k} configs (the candidates the pick "
             f"may come from),") if spec.selection.enabled else "selected LR"
    return [f"  extend: a search whose {which} sits at a bound of its LRs (a grid's or choice's end value; "
            f"within {EDGE_FACTOR:g}x of a range's bound) adds LRs beyond it, half a decade per round (a range: "
            f"{RANGE_POINTS} LRs; a list: at its own spacing), up to {rounds} round{'s' if rounds > 1 else ''} "
            f"({decades}), with that config's other values and seeds from {first} (the search's range), "
            f"each to the end of its budget; its pick is then selected again over the search and the added trials. "
            f"The extension may add up to {each} search (counted in Total)"]


def _candidate_lines(spec: SweepSpec, variants: Sequence[Searched]) -> list[str]:
    s = spec.selection
    if not s.enabled:
        return []
    used = seeds.seed_range(seeds.candidate_seeds(spec.seed, s.seeds))
    n = sum(candidate_trials(spec, search) for search in variants)
    return [f"  candidates: each variant's {s.top_k} best search configs (the ranking rule) re-trained with seeds "
            f"{used} (no search trial's, no re-run's): {n} trials, no early stopping; the pick is the best mean "
            f"validation accuracy over its {s.seeds} seeds (seed-robust selection)"]
