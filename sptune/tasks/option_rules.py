"""Task options typed and ranged: each task declares a rule per option beside its defaults (`TaskDef.rules`),
and `check_options` refuses a value of the wrong type or out of range, naming ``task.<option>``, the allowed
values and a fix, before anything is read or generated.

An option without a declared rule takes the rule its default implies (`implied_rule`): a whole-number default
is a positive count or length, a boolean a flag.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sptune.errors import SpecError
from sptune.rules.seeds import MAX_SEED


@dataclass(frozen=True)
class Option:
    """What one task option accepts: a type (int, float, bool, str, or object for a value the task checks
    itself, e.g. a mapping), a range, the words allowed (``choices``), null, a number it must divide."""

    kind: type
    low: float | None = None
    high: float | None = None
    low_open: bool = False  # low itself is excluded
    nullable: bool = False
    divides: int | None = None  # the value must divide this (a pooled image side)
    null_means: str = ""  # what null does, for the message
    choices: tuple[str, ...] = ()  # a str option's allowed words (empty: any text)
    means: str = ""  # an object option's allowed values, as the message says them

    def allowed(self) -> str:
        """The allowed values, as the message says them."""
        kind = {int: "a whole number", float: "a number", bool: "true or false", str: "a text",
                object: self.means or "a value"}[self.kind]
        parts = [kind]
        if self.choices:
            parts = [f"one of {', '.join(self.choices)}"]
        elif self.divides:
            divisors = [d for d in range(1, self.divides + 1) if self.divides % d == 0 and (self.low or 1) <= d]
            parts = [f"one of {', '.join(map(str, divisors))} (dividing {self.divides})"]
        elif self.low is not None and self.high is not None:
            parts.append(f"in {'(' if self.low_open else '['}{_number(self.low)}, {_number(self.high)}]")
        elif self.low is not None:
            parts.append(f"{'>' if self.low_open else '>='} {_number(self.low)}")
        if self.nullable:
            parts.append(f"or null ({self.null_means})" if self.null_means else "or null")
        return " ".join(parts)

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is refused (None: accepted)."""
        if value is None:
            return None if self.nullable else "may not be null"
        if self.kind is bool:
            return None if isinstance(value, bool) else "is not true or false"
        if self.kind is object:
            return None  # the task checks it (sptune.tasks.registry.TaskDef.check_available)
        if self.kind is str:
            if not isinstance(value, str):
                return "is not a text"
            return None if not self.choices or value in self.choices else "is not one of the allowed words"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return "is not a number"
        if self.kind is int and not float(value).is_integer():
            return "is not a whole number"
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return "is too small"
        if self.high is not None and value > self.high:
            return "is too large"
        if self.divides and self.divides % int(value):
            return f"does not divide {self.divides}"
        return None


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


# Rules shared by several tasks.
SEED = Option(int, low=0, high=MAX_SEED)
ROW_LIMIT = Option(int, low=1, nullable=True, null_means="every training row")
FRACTION = Option(float, low=0, high=1, low_open=True)


def implied_rule(default: Any) -> Option:
    """The rule an option's default implies: a flag, a positive whole number, or a positive number."""
    if isinstance(default, bool):
        return Option(bool)
    if isinstance(default, int):
        return Option(int, low=1)
    if isinstance(default, float):
        return Option(float, low=0, low_open=True)
    raise TypeError(f"an option with default {default!r} needs a declared rule")  # a bug in a task module


def check_options(task: str, options: Mapping[str, Any], rules: Mapping[str, Option]) -> None:
    """Refuse the first option of a type or range its rule does not accept."""
    for key, value in options.items():
        rule = rules[key]
        found = rule.problem(value)
        if found:
            raise SpecError(f"task.{key}", f"{found} (got {value!r}); task '{task}' accepts {rule.allowed()}",
                            f"set task.{key} to {rule.allowed()}, or drop it for its default")


# Pairs of options (low, high) a generator needs in that order: ListOps' lengths lie strictly between its bounds.
ORDERED = (("gen_min_len", "gen_max_len"), ("gen_min_chars", "gen_max_chars"))


def check_order(options: Mapping[str, Any], prefix: str = "task.") -> None:
    """Refuse a lower bound at or above its upper bound (the generator would search for rows that cannot exist)."""
    for low, high in ORDERED:
        if low in options and high in options and options[low] >= options[high]:
            where = f"{prefix}{low}" if prefix else f"--{low.removeprefix('gen_').replace('_', '-')}"
            raise SpecError(where, f"{options[low]} is not below {high.removeprefix('gen_')} {options[high]}",
                            f"use a {low.removeprefix('gen_')} below {options[high]}")
