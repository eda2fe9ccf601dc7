"""Counts of rows a reader skipped (e.g. unreadable Pathfinder PNGs), per task and split.

Kept apart from the readers because three places need them: the reader records them, the
prepared cache stores and restores them, and ``python -m sptune.data info`` reports them.
"""

from __future__ import annotations

# task -> split -> number of rows skipped by the last load of that task.
SKIPPED: dict[str, dict[str, int]] = {}


def record_skipped(task: str, split: str, count: int) -> None:
    SKIPPED.setdefault(task, {})[split] = int(count)


def reset_skipped(task: str) -> None:
    """Forget the counts of an earlier load: each load reports its own."""
    SKIPPED.pop(task, None)


def skipped_counts(task: str) -> dict[str, int]:
    """A copy of the counts of the last load of ``task`` (empty when nothing was skipped)."""
    return dict(SKIPPED.get(task, {}))


def restore_skipped(task: str, counts: dict[str, int]) -> None:
    """Counts saved with a prepared cache, put back when the cache is opened instead of read."""
    SKIPPED[task] = dict(counts)
