"""A user's own data swept end to end, from a folder outside the repository, through `python -m sptune.sweep` and
through `sptune.run`: scratch vs SPT on (a) a Hugging Face dataset saved with save_to_disk, (b) the same data as
parquet files, (c) an npz of their own. (a) and (b) must conclude the same test accuracies, and each study the
same results both ways.

The three studies run as one campaign (one driver, one Ray start per front end) to keep the test short; each is
also a plain spec of its own (`own_study_spec`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.helpers_results import assert_same_findings, results_of, run_api

REPO = Path(__file__).resolve().parents[2]
KINDS = ("save_to_disk", "parquet", "npz")
GRID = "search: {lr: {type: grid, values: [3.0e-3]}, batch_size: {type: choice, values: [16]}}"
SPEC = f"""name: own_KIND
seed: 0
task: TASK
model: {{d_model: 16, n_layers: 1, n_heads: 2, d_ff: 32}}
pretrain: {{epochs: 2, num_samples: 1, loss: ce, mask_ratio: 0.15, {GRID}}}
finetune: {{epochs: 2}}
variants:
  scratch: {{{GRID}}}
  spt: {{{GRID}}}
scheduler: {{type: fifo}}
training: {{warmup_fraction: 0.1}}
"""
HF_TASK = "{name: hf, source: SOURCE, vocab: char, max_length: 24}"
TASKS = {
    "save_to_disk": HF_TASK.replace("SOURCE", "./reviews"),
    "parquet": HF_TASK.replace("SOURCE", "{parquet: {train: reviews_parquet/train.parquet, test: "
                               "reviews_parquet/test.parquet}}"),
    "npz": "{name: arrays, path: ./mine.npz, input: tokens}",
}


def write_own_data(folder: Path) -> None:
    """The user's data: 96 + 32 short reviews (a save_to_disk folder and the same rows as parquet), and an npz."""
    import datasets

    rng = np.random.default_rng(0)
    words = ("good", "great", "bad", "awful", "film", "plot", "the", "a")
    texts = [" ".join(rng.choice(words, int(rng.integers(2, 6)))) for _ in range(128)]
    labels = ["pos" if sum(w in ("good", "great") for w in t.split()) >= sum(w in ("bad", "awful") for w in
              t.split()) else "neg" for t in texts]  # fmt: skip
    ds = datasets.Dataset.from_dict({"text": texts, "label": labels})
    dd = datasets.DatasetDict({"train": ds.select(range(96)), "test": ds.select(range(96, 128))})
    dd.save_to_disk(str(folder / "reviews"))
    (folder / "reviews_parquet").mkdir()
    for split, part in dd.items():
        part.to_parquet(str(folder / "reviews_parquet" / f"{split}.parquet"))
    x = rng.integers(0, 12, (128, 16))
    np.savez(folder / "mine.npz", x_train=x[:96], y_train=(x[:96, 0] > 5).astype(np.int64), x_test=x[96:],
             y_test=(x[96:, 0] > 5).astype(np.int64))  # fmt: skip


def own_study_spec(folder: Path, kind: str) -> Path:
    """The spec of study ``kind`` (save_to_disk, parquet or npz) on the data `write_own_data` wrote into
    ``folder``; its paths are relative to ``folder``, so run it from there."""
    path = folder / f"own_{kind}.yaml"
    path.write_text(SPEC.replace("KIND", kind).replace("TASK", TASKS[kind]))
    return path


def _test_accuracies(results: dict) -> list[tuple[str, int, float]]:
    return sorted((r["variant"], r["seed"], r["test_acc"]) for r in results["rows"])


@pytest.mark.slow
def test_own_data_sweeps_end_to_end_both_ways_and_both_hf_forms_agree(tmp_path):
    write_own_data(tmp_path)
    members = "".join(f"  - spec: {own_study_spec(tmp_path, kind).name}\n    name: {kind}\n" for kind in KINDS)
    (tmp_path / "own.yaml").write_text(f"campaign: own\nstudies:\n{members}")
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_DATASETS_CACHE": str(tmp_path / "hf-cache")}
    done = subprocess.run([sys.executable, "-m", "sptune.sweep", "own.yaml", "--output", "out"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=420)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run_api(tmp_path, env, "own.yaml", "api")
    results = {kind: results_of(tmp_path / "out" / kind) for kind in KINDS}
    for kind in KINDS:  # the Python API ran the same studies to the same findings
        assert_same_findings(results_of(tmp_path / "api" / kind), results[kind])
    for kind, found in results.items():
        assert {r["variant"] for r in found["rows"]} == {"scratch", "spt"}, kind
        assert found["test_reads"], kind  # the test split was read, once per selected checkpoint
    assert _test_accuracies(results["save_to_disk"]) == _test_accuracies(results["parquet"])
    data = results["parquet"]["provenance"]["data"]
    assert data["details"]["label_names"] == {"0": "neg", "1": "pos"}  # class names -> ids, in results.json
    assert data["train"] == results["save_to_disk"]["provenance"]["data"]["train"]
    assert results["npz"]["task"] == "arrays"
