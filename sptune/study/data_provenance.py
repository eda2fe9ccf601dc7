"""What results.json says of where its numbers came from: the code and libraries (the same facts the MLflow
parent run holds, `sptune.tracking.provenance`), a sha256 of each split the study used, and every test
read the audit log holds, counted per checkpoint.

The test split's fingerprint is the one each audited read recorded inside the final evaluation
(`sptune.tasks.holdout`): publishing never reads the sealed split again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sptune.tasks import holdout
from sptune.tasks.base import TaskSplits
from sptune.tracking.provenance import study_provenance


def data_fingerprints(data: TaskSplits, audit: Path) -> dict[str, Any]:
    """The study's task, the sha256 of its train and val splits, and of its test split as the final
    evaluation read it (None before any audited read; every distinct one if reads disagreed)."""
    seen = holdout.fingerprints_read(holdout.audited_reads(audit))
    fingerprints = {"task": data.info.name, "train": data.train.fingerprint(), "val": data.val.fingerprint(),
                    "test": seen[0] if seen else None}
    if len(seen) > 1:
        fingerprints["test_differs_between_reads"] = seen
    if data.details:  # how the reader mapped the user's data: columns, class names -> ids, truncation
        fingerprints["details"] = data.details
    if data.info.input_kind == "continuous":
        # What every model input was standardised with (sptune.tasks.value_stats), from the train split above.
        fingerprints["input_standardisation"] = {"mean": data.info.value_mean, "std": data.info.value_std,
                                                 "of": "x / (levels - 1)", "levels": data.info.levels}
    return fingerprints


def provenance_document(data: TaskSplits, audit: Path) -> dict[str, Any]:
    """results.json's ``provenance``: git commit and dirtiness, library versions, the driver's device, data."""
    return {**study_provenance(), "data": data_fingerprints(data, audit)}


def count_test_reads(audit: Path) -> dict[str, int]:
    """results.json's ``test_reads``: selected checkpoint -> times the test split was read for it."""
    return holdout.reads_per_checkpoint(holdout.audited_reads(audit))
