"""Which seed each training of a study uses, and what spread over seeds its results show.

Search trials use the spec's seed; the repeats of a grid point add their repeat index
(seed, seed+1, ...), so no two search trials are the same training. Seed re-runs use seeds
from a range the search never reaches (seed+1000, seed+1001, ...): a re-run is never a replay
of the trial that won the search, whose score selected it (a winner's-curse bias in the mean).
Readable offsets rather than hashed seeds: a user can tell a re-run's seed from a search's.
Stdlib only: the spec, the plan and the study all read it.
"""

from __future__ import annotations

# Re-run i uses seed + RERUN_SEED_OFFSET + i; grid repeats stay below the offset (the spec caps them).
RERUN_SEED_OFFSET = 1000
MAX_GRID_REPEATS = RERUN_SEED_OFFSET

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


def spread(n_reruns: int, rerun_pretrain: bool) -> str:
    """What the reported spread covers: NO_SPREAD, FINETUNE_SPREAD or PRETRAIN_SPREAD."""
    if n_reruns <= 1:
        return NO_SPREAD
    return PRETRAIN_SPREAD if rerun_pretrain else FINETUNE_SPREAD


def seed_range(seeds: list[int]) -> str:
    """'1000–1002' for consecutive seeds, '0' for one."""
    return str(seeds[0]) if len(seeds) == 1 else f"{seeds[0]}–{seeds[-1]}"
