"""How many trainings a search runs, and the settings that would train one config twice.

The rule: `num_samples` counts the trials of a search without a grid (Optuna or random draws);
a search with a grid runs every grid point `grid_repeats` times (default 1), each repeat with
its own seed. A pure grid therefore runs once per point unless the spec asks for repeats, and
no two trials are the same config with the same seed. Used by PretrainSpec (one section) and
SweepSpec (a variant, whose num_samples may come from finetune:).
"""

from __future__ import annotations

from pydantic_core import PydanticCustomError

from sptune.spec.fields import problem
from sptune.spec.search import SearchSpec

REPEATS_FIX = "use grid_repeats: N for N seeds per grid point (or drop num_samples)"


def written_budget_problem(
    search: SearchSpec, samples: int | None, repeats: int | None
) -> PydanticCustomError | None:
    """A num_samples or grid_repeats written in a section (None: not written) that its search does not use."""
    if search.has_grid() and samples is not None and samples > 1:
        message = f"num_samples {samples} does not apply to a grid search: each grid point runs grid_repeats times"
        return problem(message, REPEATS_FIX, "num_samples")
    if not search.has_grid() and repeats is not None and repeats > 1:
        message = "grid_repeats applies to a search with a grid; this search draws num_samples trials"
        return problem(message, "use num_samples, or make lr a grid", "grid_repeats")
    return None


def repeated_choice_problem(search: SearchSpec, samples: int, at: str = "") -> PydanticCustomError | None:
    """Only `choice` parameters and more than one trial: draws from a finite set repeat configs with
    the same seed (Optuna's TPE re-proposes a combination too), i.e. identical trainings. `at`: the
    section's path below the model that checks, with a trailing dot."""
    if not search.only_choices() or samples <= 1:
        return None
    message = (f"every parameter is a choice ({search.choice_combinations()} combinations): {samples} trials "
               "would train some config twice with the same seed")
    fix = "make lr a grid (each value once; grid_repeats for more seeds) or a loguniform range, or num_samples: 1"
    return problem(message, fix, f"{at}search.lr")
