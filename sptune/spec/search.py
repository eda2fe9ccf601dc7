"""Search spaces: one per searched hyperparameter, each type knowing its own rules."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Annotated, Literal

from pydantic import AfterValidator, StrictBool, model_validator

from sptune.spec.fields import Strict, problem

RANGE_TYPES = ("loguniform", "uniform")


class ParamSpace(Strict):
    """One hyperparameter's search: a range (Optuna/random) or a list (grid/choice). What values the
    hyperparameter may take is not its business: each field's type adds that rule (`LrSpace`, ...)."""

    type: Literal["loguniform", "uniform", "grid", "choice"]
    low: float | None = None
    high: float | None = None
    values: list[float] | None = None
    # The LR only: a selected LR at a bound adds LRs beyond it (sptune.rules.lr_extension; limit: lr_extend).
    extend: StrictBool = False

    @property
    def is_grid(self) -> bool:
        return self.type == "grid"

    def size(self) -> int | None:
        return len(self.values) if self.values is not None else None

    def candidates(self) -> list[float]:
        """The listed values, or a range's two ends."""
        return [value for _, value in self.edges()]

    def edges(self) -> list[tuple[str, float]]:
        """(field, value) for every value the search can reach the edge of."""
        if self.values:
            return [(f"values[{i}]", v) for i, v in enumerate(self.values)]
        return [("low", self.low), ("high", self.high)]

    @model_validator(mode="after")
    def _well_formed(self) -> ParamSpace:
        if self.type in RANGE_TYPES:
            self._check_range()
        else:
            self._check_list()
        return self

    def _check_range(self) -> None:
        if self.values is not None:
            raise problem(f"a {self.type} range takes low/high, not values", "drop values or use type: grid", "values")
        for bound in ("low", "high"):
            if getattr(self, bound) is None:
                raise problem(f"a {self.type} range needs '{bound}'", f"add {bound}: <number>", bound)
        if self.type == "loguniform" and self.low <= 0:
            raise problem(f"must be > 0 for a log-uniform range (got {self.low})", "use e.g. 1e-5", "low")
        if self.low >= self.high:
            raise problem(f"low {self.low} is not below high {self.high}", "swap them or widen the range", "low")

    def _check_list(self) -> None:
        for bound in ("low", "high"):
            if getattr(self, bound) is not None:
                raise problem(f"a {self.type} takes values, not low/high", "use type: loguniform for a range", bound)
        if not self.values:
            raise problem("empty list of values", "list at least one value", "values")
        # A grid value listed twice would train the same config twice with the same seed.
        if self.is_grid and len(set(self.values)) < len(self.values):
            at = next(i for i, v in enumerate(self.values) if v in self.values[:i])
            raise problem(f"grid value {self.values[at]:g} is listed twice", "list each value once", f"values[{at}]")


CandidateRule = Callable[[str, float], None]  # (field, value) -> raises a problem


def _positive(quantity: str) -> CandidateRule:
    def check(at: str, value: float) -> None:
        if not value > 0:
            raise problem(f"{quantity} must be > 0 (got {value})", f"use a positive {quantity}", at)

    return check


def _whole_batch(at: str, value: float) -> None:
    _positive("batch_size")(at, value)
    if float(value) != int(value):
        raise problem(f"batch_size must be an integer (got {value})", "use whole numbers", at)


def _decay(at: str, value: float) -> None:
    # AdamW's decoupled weight decay: 0 (none) is a value worth searching.
    if value < 0:
        raise problem(f"weight_decay must be >= 0 (got {value})", "use e.g. 0, 0.01 or 0.1", at)


def _fraction(at: str, value: float) -> None:
    if not 0 <= value < 1:
        raise problem(f"must be in [0, 1) (got {value})", "use e.g. 0.0, 0.1 or 0.2", at)


def _ruled(rule: CandidateRule, discrete: bool = False) -> AfterValidator:
    """A ParamSpace whose every reachable value obeys `rule`; `discrete`: listed values only."""

    def check(space: ParamSpace) -> ParamSpace:
        for at, value in space.edges():
            rule(at, value)
        if discrete and space.type in RANGE_TYPES:
            # A range would draw fractions.
            raise problem("batch_size needs a discrete list", "use type: choice or grid with values", "type")
        return space

    return AfterValidator(check)


LrSpace = Annotated[ParamSpace, _ruled(_positive("lr"))]
BatchSizeSpace = Annotated[ParamSpace, _ruled(_whole_batch, discrete=True)]
WeightDecaySpace = Annotated[ParamSpace, _ruled(_decay)]
# The warm-up share of the schedule, or a dropout probability.
FractionSpace = Annotated[ParamSpace, _ruled(_fraction)]


class SearchSpec(Strict):
    lr: LrSpace
    batch_size: BatchSizeSpace
    # Searched like lr when given; otherwise the section's weight_decay, training.warmup_fraction
    # and model.dropout hold for every trial.
    weight_decay: WeightDecaySpace | None = None
    warmup_fraction: FractionSpace | None = None
    dropout: FractionSpace | None = None

    def items(self) -> list[tuple[str, ParamSpace]]:
        """Every searched hyperparameter, in the order trials and reports list them."""
        optional = [("weight_decay", self.weight_decay), ("warmup_fraction", self.warmup_fraction),
                    ("dropout", self.dropout)]
        return [("lr", self.lr), ("batch_size", self.batch_size), *((n, p) for n, p in optional if p is not None)]

    @model_validator(mode="after")
    def _only_lr_extends(self) -> SearchSpec:
        for name, space in self.items():
            if space.extend and name != "lr":
                raise problem("only the LR search is extended beyond its bounds", "drop extend", f"{name}.extend")
        if self.lr.extend and self.lr.values is not None and len(set(self.lr.values)) < 2:
            raise problem("extending needs at least two LRs (the list's spacing and which end is an edge)",
                          "list two or more LRs, or drop extend", "lr.extend")
        return self

    def has_grid(self) -> bool:
        return any(p.is_grid for _, p in self.items())

    def only_choices(self) -> bool:
        """Every parameter a choice: a searcher can only draw from a finite set of configs."""
        return all(p.type == "choice" for _, p in self.items())

    def choice_combinations(self) -> int:
        return math.prod(len(set(p.values)) for _, p in self.items() if p.type == "choice")

    def grid_size(self) -> int:
        return math.prod(p.size() or 1 for _, p in self.items() if p.is_grid)
