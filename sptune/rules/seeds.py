"""Which seed each training of a study uses, and what spread over seeds its results show.

Three disjoint ranges, each a readable offset from the spec's seed (a user can tell them apart):

- search: seed, seed+1, ... (the repeats of a grid point add their repeat index, so no two search trials
  are the same training); an LR extension's trials take seed+900, seed+901, ... in the same range;
- re-runs: seed+1000, seed+1001, ...: a re-run is never a replay of the trial that won the search, whose
  score selected it (a winner's-curse bias in the mean);
- candidates (seed-robust selection): seed+2000, seed+2001, ...: no search trial and no re-run uses them, so
  neither the pick nor the test numbers reuse a seed that selected something.

Stdlib only: the spec, the plan and the study all read it.
"""

from __future__ import annotations

# Grid repeats stay below the extension's seeds, and those below the re-runs' (the spec caps each count).
EXTENSION_SEED_OFFSET = 900
MAX_GRID_REPEATS = EXTENSION_SEED_OFFSET
RERUN_SEED_OFFSET = 1000
MAX_EXTENSION_TRIALS = RERUN_SEED_OFFSET - EXTENSION_SEED_OFFSET
CANDIDATE_SEED_OFFSET = 2000
MAX_RERUN_SEEDS = CANDIDATE_SEED_OFFSET - RERUN_SEED_OFFSET
MAX_CANDIDATE_SEEDS = 1000
# The largest spec seed: every seed derived from it (the candidates' are the highest) stays a seed numpy's
# legacy generator and torch both accept, [0, 2**32).
MAX_SEED = 2**32 - 1 - CANDIDATE_SEED_OFFSET - MAX_CANDIDATE_SEEDS

# results.json's "spread": which sources of variance the reported mean ± std covers.
NO_SPREAD, FINETUNE_SPREAD, PRETRAIN_SPREAD = "none", "finetune", "pretrain+finetune"
SPREAD_TEXT = {
    NO_SPREAD: "One selected run per variant (rerun_seeds: 1): no spread over seeds.",
    FINETUNE_SPREAD: "Spread over finetuning seeds only (each SPT checkpoint fixed: pretraining variance not "
    "included).",
    PRETRAIN_SPREAD: "Spread over pretraining + finetuning seeds (each SPT variant's re-run starts from SPT "
    "re-pretrained with its own seed).",
}


def search_seeds(seed: int, grid_repeats: int = 1) -> list[int]:
    """The seeds of a search's trials: one per repeat of a grid point (a non-grid search: just `seed`)."""
    return [seed + r for r in range(grid_repeats)]


def rerun_seeds(seed: int, n: int) -> list[int]:
    """The seeds of the re-runs: disjoint from every search seed (grid repeats < RERUN_SEED_OFFSET)."""
    return [seed + RERUN_SEED_OFFSET + i for i in range(n)]


def sequential_looks(low: int, high: int, step: int) -> tuple[int, ...]:
    """Sequential re-runs: the seeds each variant has at each look, low, low + step, ... and always ``high`` last;
    look k re-trains ``rerun_seeds(seed, high)[looks[k - 1]:looks[k]]``."""
    sizes = list(range(low, high + 1, step))
    return tuple(sizes if sizes[-1] == high else [*sizes, high])


def extension_seeds(seed: int, first: int, n: int) -> list[int]:
    """The seeds of an LR extension's trials `first` .. `first + n - 1` (counted over its rounds): in the
    search's range, above every grid repeat."""
    if first + n > MAX_EXTENSION_TRIALS:
        raise ValueError(f"at most {MAX_EXTENSION_TRIALS} extension trials per search (asked for {first + n})")
    return [seed + EXTENSION_SEED_OFFSET + first + i for i in range(n)]


def candidate_seeds(seed: int, n: int) -> list[int]:
    """The seeds each candidate of seed-robust selection is re-trained with: no search trial's, no re-run's."""
    return [seed + CANDIDATE_SEED_OFFSET + i for i in range(n)]


def spread(n_reruns: int, rerun_pretrain: bool) -> str:
    """What the reported spread covers: NO_SPREAD, FINETUNE_SPREAD or PRETRAIN_SPREAD."""
    if n_reruns <= 1:
        return NO_SPREAD
    return PRETRAIN_SPREAD if rerun_pretrain else FINETUNE_SPREAD


def seed_range(seeds: list[int]) -> str:
    """'1000–1002' for consecutive seeds, '0' for one."""
    return str(seeds[0]) if len(seeds) == 1 else f"{seeds[0]}–{seeds[-1]}"
