"""The study's phases: what a trial is doing, as its `SearchPlan` says (the plan produces them).

A phase travels with every trial as plain text (the trial's config, the MLflow tag ``sptune.phase``, the
Optuna study's user attrs), so `Phase` is a `StrEnum`: a member compares, formats and serialises as the
same string. A *stage kind* (`sptune.judging.stage_graph.StageKind`) says what a stage of the Tuner is; the
phase is what its trials are (a search stage's trials are `pretrain` or `search`; a candidates stage's
trials are each a `candidate`).
"""

from __future__ import annotations

from enum import StrEnum


class Phase(StrEnum):
    PRETRAIN = "pretrain"  # a pretraining objective's search (its re-runs per seed are RERUN)
    SEARCH = "search"  # a variant's LR/batch search, early-stopped as the spec asks
    EXTEND = "extend"  # a round of a variant's LR extension: LRs beyond the bound its pick sits at
    CANDIDATE = "candidate"  # one of a variant's K best search configs, re-trained per candidate seed
    RERUN = "rerun"  # a selected config re-trained per re-run seed (a variant's; a pretraining's with an objective)


# Phases whose trials train to the end of their budget: no early stopping, so they compete on equal epochs.
TRAINED_TO_THE_END = (Phase.RERUN, Phase.EXTEND, Phase.CANDIDATE)
