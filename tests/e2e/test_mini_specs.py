"""Every shipped search space and campaign validates and dry-runs; every *_mini spec runs end to end.

Dry-runs load the task's data: generated offline for ListOps, Retrieval, Pathfinder and PathX (into
a temporary SPTUNE_CACHE_DIR), a small synthetic aclImdb folder for Text (written here; not IMDb),
and CIFAR-10 only where SPTUNE_DATA_DIR or /work/shared/data holds it (skipped otherwise); CIFAR-10 has no
generator, so every spec and campaign on it is also refused, naming the file, where its data are absent.
The end-to-end tests run each *_mini spec and campaign with a tiny budget through real Ray Tune and MLflow; the
costly ones are heavy (SPTUNE_HEAVY=1, tests/conftest.py).
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from sptune.errors import SpecError
from sptune.spec import SweepSpec, load_spec
from sptune.spec.campaign import expand
from sptune.sweep import main
from sptune.tasks import TaskRequest, check_task, load_task
from tests.helpers_tiny import PLAIN_PICK

ROOT = Path(__file__).resolve().parents[2]
SPECS = sorted((ROOT / "search_spaces").glob("*.yaml"))
SWEEPS = sorted((ROOT / "sweeps").glob("*.yaml"))
# Files in sweeps/ that are not campaigns, or whose dry run another test makes, with why.
NOT_DRY_RUN_HERE = {
    "cluster.yaml": "a Ray cluster launcher file (`ray up sweeps/cluster.yaml`), not a campaign",
    "lra_table.yaml": "dry-run on generated LRA data, with its cost estimate, in tests/plan/test_cost.py",
}
# Tasks without a generator: their specs dry-run only where the data are, and are refused where they are not.
NO_GENERATOR = ("image",)
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


def campaign_specs(path: Path) -> list[tuple[str, SweepSpec]]:
    """Each study of a campaign file: its name and its spec with the campaign's overrides."""
    studies = expand(yaml.safe_load(path.read_text()), path)
    return [(study.name, load_spec(study.spec_path, list(study.overrides))) for study in studies]


def tiny_language_models(specs: list[SweepSpec], cwd: Path, monkeypatch) -> None:
    """What the campaigns' headers tell a user to make first: the tiny random GPT-2 at each spec's
    language_model.path, relative to the folder the command runs in (here ``cwd``)."""
    paths = {spec.language_model.path for spec in specs if spec.language_model is not None}
    if not paths:
        return
    pytest.importorskip("transformers")
    from sptune.training.models.lm import make_tiny_gpt2

    monkeypatch.chdir(cwd)
    for path in paths:
        make_tiny_gpt2(cwd / path)


@pytest.mark.parametrize("path", SWEEPS, ids=[p.stem for p in SWEEPS])
def test_campaign_dry_runs(path, offline, synthetic_text, capsys, tmp_path, monkeypatch):
    if path.name in NOT_DRY_RUN_HERE:
        pytest.skip(NOT_DRY_RUN_HERE[path.name])
    studies = campaign_specs(path)
    (task,) = {spec.task.name for _, spec in studies}  # every shipped campaign studies one task
    tiny_language_models([spec for _, spec in studies], tmp_path, monkeypatch)
    if any(spec.resources.gpu for _, spec in studies):  # planned for the GPU machine it names, from this one
        monkeypatch.setattr("sptune.preflight.ready.local_gpus", lambda: 1)
        monkeypatch.setattr("sptune.study.ray_session.is_connected", lambda: False)
    assert main([str(path), "--dry-run", *data_args(task, synthetic_text)]) == 0
    out = capsys.readouterr().out
    for name, _ in studies:
        assert f"=== study {name} ===" in out, name


def _on_a_task_without_generator(path: Path) -> bool:
    """Whether a spec or campaign studies a task without a generator; one that does not load counts (its test
    fails with its error, while every other test of this module still runs)."""
    try:
        specs = [spec for _, spec in campaign_specs(path)] if path.parent.name == "sweeps" else [load_spec(path)]
    except SpecError:
        return True
    return any(spec.task.name in NO_GENERATOR for spec in specs)


def _needs_missing_data() -> list[Path]:
    """Every shipped spec and campaign on a task without a generator."""
    return [p for p in (*SPECS, *SWEEPS) if p.name != "cluster.yaml" and _on_a_task_without_generator(p)]


@pytest.mark.parametrize("path", _needs_missing_data(), ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_a_spec_whose_data_are_absent_is_refused_naming_the_file(path, offline, capsys, tmp_path, monkeypatch):
    empty = tmp_path / "no_data"
    empty.mkdir()
    monkeypatch.setattr("sptune.preflight.ready.local_gpus", lambda: 8)  # the GPU specs reach the data check too
    monkeypatch.setattr("sptune.study.ray_session.is_connected", lambda: False)
    assert main([str(path), "--dry-run", "--data-dir", str(empty)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert f"--data-dir {empty}: holds no cifar10_gray.npz or cifar10.npz and no cifar-10-batches-py/" in err, err
    assert "Fix: pass --data-dir DIR" in err, err


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
    assert (full.info.image_side, small.info.image_side) == (32, 16)
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


# ----------------------------------------------------------------------------- every other mini, end to end
# Each *_mini spec and campaign at its smallest budget that still runs its path (pretraining, each variant's search,
# selection, the one test read, the report): one epoch per stage, one trial per search, a few hundred rows.
# listops_mini is trained above, with more checks. The campaigns train many variants; they, cifar_mini (CIFAR-10
# is not always there) and pathx_mini (drawing its images is slow) are heavy.
TINY_ROWS = {
    "text": ["task.max_train=160"],
    "retrieval": ["task.gen_n_train=160", "task.gen_n_val=40", "task.gen_n_test=40"],
    "pathfinder": ["task.gen_n=100"],
    "pathx": ["task.gen_n=60"],
    "image": ["task.max_train=200", "task.n_val=100"],
}
MINIS = [
    pytest.param(ROOT / "search_spaces" / f"{task}_mini.yaml", id=f"{task}_mini")
    for task in ("text", "retrieval")
] + [
    pytest.param(ROOT / "search_spaces" / "pathfinder_mini.yaml", id="pathfinder_mini", marks=pytest.mark.heavy),
] + [
    pytest.param(path, id=path.stem, marks=pytest.mark.heavy)
    for path in (ROOT / "search_spaces" / "cifar_mini.yaml", ROOT / "search_spaces" / "pathx_mini.yaml",
                 *sorted((ROOT / "sweeps").glob("*_mini.yaml")))
]


def tiny_budget(specs: list[SweepSpec]) -> list[str]:
    """--set overrides shrinking every study of a run alike (a campaign's variants differ between its studies:
    only those every study has get a one-point grid)."""
    (task,) = {spec.task.name for spec in specs}
    sets = ["finetune.epochs=1", "scheduler.type=fifo", "rerun_seeds=1", *PLAIN_PICK, *TINY_ROWS.get(task, [])]
    if all(spec.pretrain is not None for spec in specs):
        sets += ["pretrain.epochs=1", "pretrain.num_samples=1"]
    shared = set.intersection(*(set(spec.variants) for spec in specs))
    sets += [f"variants.{name}.search.lr={{type: grid, values: [3.0e-3]}}" for name in sorted(shared)]
    return [arg for assignment in sets for arg in ("--set", assignment)]


@pytest.mark.parametrize("path", MINIS)
def test_mini_trains_end_to_end(path, ray_session, offline, synthetic_text, tmp_path, monkeypatch):
    campaign = path.parent.name == "sweeps"
    studies = campaign_specs(path) if campaign else [(load_spec(path).name, load_spec(path))]
    specs = [spec for _, spec in studies]
    tiny_language_models(specs, tmp_path, monkeypatch)
    out = tmp_path / path.stem
    argv = [str(path), "--output", str(out), *data_args(specs[0].task.name, synthetic_text), *tiny_budget(specs)]
    assert main(argv) == 0

    rows = json.loads((out / "results.json").read_text())["rows"]
    for name, spec in studies:
        mine = [r for r in rows if r.get("study", name) == name]
        assert {r["variant"] for r in mine} == set(spec.variants), name
        for row in mine:
            assert math.isfinite(row["test_acc"]) and 0 <= row["test_acc"] <= 1, row
