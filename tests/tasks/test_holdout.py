"""The test split is sealed: readable only inside final_evaluation(), never in trials."""

from __future__ import annotations

import json

import pytest

from sptune.study.data_provenance import data_fingerprints
from sptune.tasks import TaskRequest, holdout, load_task


def test_test_split_is_sealed_outside_final_evaluation(tmp_path):
    splits = load_task(TaskRequest("digits"))
    with pytest.raises(holdout.SealedSplitError):
        _ = splits.test
    audit = tmp_path / "reads.jsonl"
    with holdout.final_evaluation(audit):
        assert len(splits.test) == 359
    with pytest.raises(holdout.SealedSplitError):
        _ = splits.test
    assert len([json.loads(x) for x in audit.read_text().splitlines()]) == 1


def test_data_shipped_to_trials_has_no_test_split_at_all():
    trial_data = load_task(TaskRequest("digits")).without_test()
    with holdout.final_evaluation(), pytest.raises(holdout.SealedSplitError):
        _ = trial_data.test


def test_splits_are_disjoint_and_fixed():
    a, b = load_task(TaskRequest("digits", seed=0)), load_task(TaskRequest("digits", seed=5))
    assert (a.train.x == b.train.x).all()  # the split never depends on the study seed
    with holdout.final_evaluation():
        test = a.test
    rows = {r.tobytes() for r in a.train.x}
    val_rows = {r.tobytes() for r in a.val.x}
    test_rows = {r.tobytes() for r in test.x}
    assert len(a.train) + len(a.val) + len(test) == 1797
    # Digits has a few duplicate images; index-level disjointness shows as near-zero overlap.
    assert len(rows & test_rows) <= 5 and len(rows & val_rows) <= 5


def test_each_audited_read_names_its_checkpoint_and_the_sha256_of_what_it_read(tmp_path):
    splits = load_task(TaskRequest("digits"))
    audit = tmp_path / "reads.jsonl"
    with holdout.final_evaluation(audit):
        with holdout.reading_for("/ckpt/a"):
            first = splits.test
        with holdout.reading_for("/ckpt/b"):
            _ = splits.test
        with holdout.reading_for("/ckpt/a"):  # e.g. a resume re-reading for the same checkpoint
            _ = splits.test
    reads = holdout.audited_reads(audit)
    assert [r["checkpoint"] for r in reads] == ["/ckpt/a", "/ckpt/b", "/ckpt/a"]
    assert {r["sha256"] for r in reads} == {first.fingerprint()}
    assert holdout.reads_per_checkpoint(reads) == {"/ckpt/a": 2, "/ckpt/b": 1}
    assert holdout.fingerprints_read(reads) == [first.fingerprint()]


def test_results_provenance_fingerprints_every_split_without_reading_the_test_split_again(tmp_path):
    splits = load_task(TaskRequest("digits"))
    audit = tmp_path / "reads.jsonl"
    assert data_fingerprints(splits, audit)["test"] is None  # sealed and unread: no fingerprint, no error
    with holdout.final_evaluation(audit), holdout.reading_for("/ckpt/a"):
        test = splits.test
    # Outside the final evaluation: reading the sealed split would raise; the audit keeps its one read.
    prints = data_fingerprints(splits, audit)
    assert len(holdout.audited_reads(audit)) == 1
    standardised = {"mean": splits.info.value_mean, "std": splits.info.value_std, "of": "x / (levels - 1)",
                    "levels": 17}  # the train split's statistics every model input was standardised with
    assert prints == {"task": "digits", "train": splits.train.fingerprint(), "val": splits.val.fingerprint(),
                      "test": test.fingerprint(), "input_standardisation": standardised}
    assert len({prints["train"], prints["val"], prints["test"]}) == 3 and len(prints["train"]) == 64
    # The same data gives the same fingerprint; one changed label gives another.
    again = load_task(TaskRequest("digits"))
    assert again.train.fingerprint() == prints["train"]
    y = again.train.y.copy()
    y[0] = (y[0] + 1) % 10
    assert type(again.train)(again.train.x, y).fingerprint() != prints["train"]
