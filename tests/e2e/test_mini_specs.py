"""Every shipped search space validates and dry-runs; the ListOps mini runs end to end.

Dry-runs load the task's data: generated offline for ListOps, Retrieval, Pathfinder and PathX (into
a temporary SPTUNE_CACHE_DIR), a small synthetic aclImdb folder for Text (written here; not IMDb),
and CIFAR-10 only where SPTUNE_DATA_DIR or /work/shared/data holds it (skipped otherwise).
The end-to-end test runs listops_mini.yaml with a tiny budget through real Ray Tune and MLflow.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from sptune.errors import SpecError
from sptune.spec import load_spec
from sptune.sweep import main
from sptune.tasks import TaskRequest, check_task, load_task

ROOT = Path(__file__).resolve().parents[2]
SPECS = sorted((ROOT / "search_spaces").glob("*.yaml"))
SHARED_DATA = Path("/work/shared/data")
MINI_TASKS = ("listops", "text", "retrieval", "pathfinder", "pathx", "cifar")


@pytest.fixture(scope="module")
def offline(tmp_path_factory):
    """One generated-data cache for the module (dry-runs of a task share their generated set)."""
    cache = tmp_path_factory.mktemp("sptune_cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPTUNE_CACHE_DIR", str(cache))
        mp.setenv("HF_DATASETS_OFFLINE", "1")
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.delenv("SPTUNE_DATA_DIR", raising=False)
        yield cache


@pytest.fixture(scope="module")
def synthetic_text(tmp_path_factory):
    from sptune.tasks.text import generate_synthetic_imdb

    root = tmp_path_factory.mktemp("synthetic_text")
    generate_synthetic_imdb(root, seed=0, n_train=3000, n_test=100)  # text_lr carves 2,500 for val
    return root


def cifar_dir() -> Path | None:
    for candidate in (os.environ.get("SPTUNE_DATA_DIR"), SHARED_DATA):
        if candidate and (Path(candidate) / "cifar10_gray.npz").is_file():
            return Path(candidate)
    return None


# Drawing Pathfinder images is slow (PathX: ~0.1 s each), so dry-runs draw fewer (32 training rows: the specs'
# smallest batch fits them); the plan is the same.
FEWER_IMAGES = ["--set", "task.gen_n=40"]
# The *_lr specs are the papers' setups, sized for the LRA release: on the small generated (or synthetic) sets the
# task's warm-ups in steps outlast their budgets, which the preflight refuses (their headers say to dry-run so).
SMALL_SET_WARMUP = ["--set", "training.warmup_fraction=0.1"]


def data_args(task: str, synthetic_text: Path) -> list[str]:
    """--data-dir for the tasks that have no generator (skip when absent); smaller generated sets."""
    if task in ("pathfinder", "pathx"):
        return FEWER_IMAGES
    if task == "image":
        found = cifar_dir()
        if found is None:
            pytest.skip("CIFAR-10 (cifar10_gray.npz) not found in SPTUNE_DATA_DIR or /work/shared/data")
        return ["--data-dir", str(found)]
    if task == "text":
        return ["--data-dir", str(synthetic_text)]
    return []


def test_every_task_has_an_lr_spec_and_a_mini():
    names = {p.stem for p in SPECS}
    for task in MINI_TASKS:
        assert f"{task}_mini" in names, task
        assert f"{task}_lr" in names, task


@pytest.mark.parametrize("path", SPECS, ids=[p.stem for p in SPECS])
def test_spec_validates(path):
    spec = load_spec(path)
    assert spec.name == path.stem
    if spec.needs_pretraining():
        assert spec.pretrain.enabled


@pytest.mark.parametrize("path", [p for p in SPECS if p.stem.endswith("_lr")], ids=lambda p: p.stem)
def test_lr_specs_sweep_each_variant_over_1e5_to_1e2(path):
    spec = load_spec(path)
    assert {"scratch", "spt"} <= set(spec.variants)
    for name in ("scratch", "spt"):
        lrs = spec.variants[name].search.lr.candidates()
        assert min(lrs) <= 1e-5 and max(lrs) >= 1e-2, (name, lrs)
    assert spec.scheduler.type == "sha"  # order-independent early stopping (the default)


@pytest.mark.parametrize("path", SPECS, ids=[p.stem for p in SPECS])
def test_spec_dry_runs(path, offline, synthetic_text, capsys, tmp_path, monkeypatch):
    spec = load_spec(path)
    extra = []
    if spec.language_model is not None:  # FPT specs: a tiny local GPT-2 stands in for the real one
        pytest.importorskip("transformers")
        from sptune.training.models.lm import make_tiny_gpt2

        extra = ["--set", f"language_model.path={make_tiny_gpt2(tmp_path / 'gpt2')}"]
    if spec.resources.gpu:  # planned for the GPU machine it names, from this one
        monkeypatch.setattr("sptune.preflight.ready.local_gpus", lambda: 1)
        monkeypatch.setattr("sptune.study.ray_session.is_connected", lambda: False)  # not the suite's shared Ray
    if path.stem.endswith("_lr") and spec.task.name != "image":
        extra += SMALL_SET_WARMUP
    assert main([str(path), "--dry-run", *data_args(spec.task.name, synthetic_text), *extra]) == 0
    out = capsys.readouterr().out
    assert f"Study '{spec.name}'" in out and "Searches" in out


def test_an_lr_spec_on_the_generated_set_is_refused_naming_its_inherited_warmup(offline, capsys):
    assert main([str(ROOT / "search_spaces" / "listops_lr.yaml"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "pretrain.warmup_steps: task 'listops' defaults to a warm-up of 2000 optimizer steps" in err


def test_mini_token_tasks_use_ce_and_paper_mask_ratios():
    ratios = {"listops": 0.1, "text": 0.15, "retrieval": 0.15, "pathfinder": 0.5, "pathx": 0.5, "cifar": 0.5}
    for task, ratio in ratios.items():
        for suffix in ("mini", "lr"):
            spec = load_spec(ROOT / "search_spaces" / f"{task}_{suffix}.yaml")
            assert spec.pretrain.mask_ratio == ratio, (task, suffix)
            if task in ("listops", "text", "retrieval"):
                assert spec.pretrain.loss == "ce", (task, suffix)


# ----------------------------------------------------------------------------- task options the minis use
def test_pathfinder_resolution_pools_images(offline):
    def load(**options):
        request = TaskRequest("pathfinder", {"gen_n": 40, **options}, 0, None)
        check_task(request)
        return load_task(request)

    full, small = load(), load(resolution=16)
    assert full.info.seq_len == 1024 and small.info.seq_len == 256
    x = full.train.x[:3].astype(np.float64).reshape(3, 16, 2, 16, 2).mean(axis=(2, 4))
    assert np.array_equal(small.train.x[:3], np.rint(x).reshape(3, -1).astype(np.uint8))
    assert np.array_equal(small.train.y, full.train.y)
    with pytest.raises(SpecError, match="task.resolution"):
        check_task(TaskRequest("pathx", {"resolution": 48}, 0, None))


def test_synthetic_text_is_labelled_and_labels_follow_sentiment(synthetic_text, offline):
    from sptune.tasks.text import NEGATIVE_WORDS, POSITIVE_WORDS

    root = synthetic_text / "aclImdb"
    assert "NOT IMDb" in (root / "SYNTHETIC.txt").read_text()
    for sub, label in (("neg", 0), ("pos", 1)):
        for path in sorted((root / "train" / sub).glob("*.txt"))[:50]:
            words = path.read_text().lower().rstrip(".").split()
            votes = sum(w in POSITIVE_WORDS for w in words) - sum(w in NEGATIVE_WORDS for w in words)
            assert (votes > 0) == bool(label), path
    splits = load_task(TaskRequest("text", {"max_len": 128, "n_val": 50}, 0, synthetic_text))
    assert "SYNTHETIC" in splits.source
    assert len(splits.train) == 2950 and len(splits.val) == 50


# ----------------------------------------------------------------------------- end to end
TINY_LISTOPS = [
    "--set", "task.gen_n_train=160", "--set", "task.gen_n_val=40", "--set", "task.gen_n_test=40",
    "--set", "pretrain.epochs=2", "--set", "pretrain.num_samples=1",
    "--set", "finetune.epochs=2", "--set", "scheduler.grace_period=1",
    "--set", "variants.scratch.num_samples=1", "--set", "variants.spt.num_samples=1",
    "--set", "variants.scratch.search.lr={type: grid, values: [3.0e-3]}",
    "--set", "variants.spt.search.lr={type: grid, values: [3.0e-3]}",
]


def test_listops_mini_end_to_end(ray_session, offline, tmp_path):
    out = tmp_path / "listops_mini"
    spec_path = ROOT / "search_spaces" / "listops_mini.yaml"
    assert main([str(spec_path), "--output", str(out), *TINY_LISTOPS]) == 0

    results = json.loads((out / "results.json").read_text())
    rows = {r["variant"]: r for r in results["rows"]}
    assert set(rows) == {"scratch", "spt"}
    for row in rows.values():
        assert math.isfinite(row["val_acc"]) and 0 <= row["val_acc"] <= 1
        assert math.isfinite(row["test_acc"]) and 0 <= row["test_acc"] <= 1
        assert row["trials"] == 1
    assert (out / "mlflow.db").is_file()

    # Same vocabulary in both stages: the embedding tables of the selected SPT checkpoint and of
    # every selected finetune checkpoint have one row per token of the task's vocabulary, and the
    # SPT head predicts over exactly that vocabulary (so <mask> and every token keep their ids).
    spec = load_spec(spec_path, [s for s in TINY_LISTOPS if s != "--set"])
    data = load_task(TaskRequest("listops", spec.task.options, spec.seed, None))
    vocab = data.info.vocab
    assert vocab[data.info.mask_id] == "<mask>" and "]" in vocab
    pretrained = torch.load(Path(results["pretrain"]["checkpoint_path"]) / "state.pt", weights_only=True)["model"]
    assert pretrained["encoder.embed.weight"].shape[0] == len(vocab)
    assert pretrained["reconstruct.proj.weight"].shape[0] == len(vocab)
    for row in rows.values():
        finetuned = torch.load(Path(row["checkpoint"]) / "state.pt", weights_only=True)["model"]
        assert finetuned["encoder.embed.weight"].shape == pretrained["encoder.embed.weight"].shape
