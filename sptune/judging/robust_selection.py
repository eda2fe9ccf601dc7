"""Seed-robust selection (`selection: {top_k, seeds}`): a variant's K best search configs (its *candidates*), each
re-trained with M seeds no search trial and no re-run uses, and the pick: the one ranking rule
(`sptune.rules.ranking`) applied to each candidate's means over its seeds, so one lucky seed cannot pick a
config. Also results.json's `candidates` entries and their lines in results.md and at the end of a study.

No torch, no Ray: the staged searcher picks with it, and results read what it recorded.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sptune.judging.stats import finite_float
from sptune.rules.ranking import RankKey, rank_key

CANDIDATE_RULE = ("the pick is the candidate with the best mean over its seeds by the ranking rule (higher mean "
                  "val_acc, then lower mean val_loss, then the earlier mean epoch, then the better-ranked in the "
                  "search); a candidate with a diverged or failed seed ranks after every candidate whose seeds all "
                  "trained")


@dataclass(frozen=True)
class CandidateRuns:
    """One candidate: its searched values, and per seed the validation-best epoch's metrics of its re-training
    (None: that seed diverged or failed)."""

    config: dict[str, Any]
    seeds: tuple[int, ...]
    runs: tuple[dict[str, Any] | None, ...]

    @property
    def used(self) -> list[dict[str, Any]]:
        return [r for r in self.runs if r is not None]


def mean_metrics(runs: Sequence[dict[str, Any]]) -> dict[str, float]:
    """The means over seeds of what the ranking rule reads (a missing or non-finite value leaves its mean out)."""
    means = {}
    for key in ("val_acc", "val_loss", "epoch"):
        values = [v for r in runs if (v := finite_float(r.get(key))) is not None]
        if values:
            means[key] = sum(values) / len(values)
    return means


def candidate_key(candidate: CandidateRuns, metric: str, position: int) -> RankKey:
    """Smaller is better: fewer unusable seeds, then the ranking rule on the means, `position` (the candidate's
    rank in the search) standing for the trial index."""
    unusable = len(candidate.runs) - len(candidate.used)
    return (float(unusable), *rank_key(mean_metrics(candidate.used), metric, position))


def pick_candidate(candidates: Sequence[CandidateRuns], metric: str = "val_acc") -> int:
    """The index of the pick among `candidates` (listed best first by the search)."""
    return min(range(len(candidates)), key=lambda i: candidate_key(candidates[i], metric, i))


def _spread(values: list[float]) -> float | None:
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    return math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))


def candidate_entries(candidates: Sequence[CandidateRuns], picked: int,
                      search_scores: Sequence[float]) -> list[dict[str, Any]]:
    """results.json's `candidates` of one variant: per candidate its config, seeds, per-seed validation scores
    (None: diverged or failed), their mean and sample std, the score that ranked it in the search, the pick."""
    entries = []
    for i, c in enumerate(candidates):
        scores = [None if r is None else finite_float(r.get("val_acc")) for r in c.runs]
        used = [x for x in scores if x is not None]
        entries.append({"config": dict(c.config), "seeds": list(c.seeds), "val_acc_per_seed": scores,
                        "mean": sum(used) / len(used) if used else None, "std": _spread(used),
                        "n_used": len(used), "search_score": search_scores[i], "picked": i == picked})
    return entries


def _config_text(config: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in config.items())


def _mean_text(entry: dict[str, Any]) -> str:
    if entry["mean"] is None:
        return "-"
    return f"{entry['mean']:.4f}" + (f" ± {entry['std']:.4f}" if entry["std"] is not None else "")


def candidate_lines(candidates: dict[str, list[dict[str, Any]]] | None) -> list[str]:
    """results.md's (and the study's last printout's) table of every variant's candidates."""
    if not candidates:
        return []
    lines = ["", "Seed-robust selection: each variant's best search configs re-trained with fresh seeds, "
             f"to the end; {CANDIDATE_RULE}.", "",
             "| variant | candidate | search val acc | val acc per seed | mean ± std | picked |",
             "|---|---|---|---|---|---|"]
    for variant, entries in candidates.items():
        for e in entries:
            per_seed = " / ".join("✗" if x is None else f"{x:.4f}" for x in e["val_acc_per_seed"])
            lines.append(f"| {variant} | {_config_text(e['config'])} | {e['search_score']:.4f} | {per_seed} | "
                         f"{_mean_text(e)} | {'✓' if e['picked'] else ''} |")
    failed = any(x is None for entries in candidates.values() for e in entries for x in e["val_acc_per_seed"])
    return lines + (["", "✗: a seed that diverged or failed."] if failed else [])
