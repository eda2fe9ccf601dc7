"""Selected SPT checkpoints cached by what determines them, so studies that share a
pretraining setup (a campaign's ablations over finetuning settings) pretrain once."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from sptune import storage
from sptune.plan.study_plan import SearchPlan
from sptune.spec import SweepSpec
from sptune.training.checkpoint_files import STATE_FILE


def cache_key(spec: SweepSpec, pretraining: SearchPlan) -> str:
    """Hash of everything that shapes the selected SPT checkpoint (not finetuning settings)."""
    task = pretraining.pretrain_source.task or spec.task
    pretrain = _pretrain_key(spec)
    parts = {
        "task": task.model_dump(mode="json"),
        "model": _model_key(spec),
        "pretrain": pretrain,
        "objective": pretraining.objective,
        "seed": spec.seed,
        "scheduler": spec.scheduler.model_dump(mode="json"),
        "searcher": _searcher_key(spec),
        "training": _training_key(spec),
        # Continuous inputs reach the model standardised (sptune.tasks.value_stats); checkpoints cached before
        # saw raw [0, 1] values, and their keys lack this entry, so none of them is reused.
        "inputs": "standardised",
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


def _model_key(spec: SweepSpec) -> dict:
    """The model section; a plug-in family's `options` only when given, so keys of caches written before it existed
    match."""
    model = spec.model.model_dump(mode="json")
    if not model.get("options"):
        model.pop("options", None)
    return model


def _training_key(spec: SweepSpec) -> dict:
    """The training section; `deterministic` only when on, so keys of caches written before it existed match."""
    training = spec.training.model_dump(mode="json")
    if not training.get("deterministic"):
        training.pop("deterministic", None)
    return training


def _pretrain_key(spec: SweepSpec) -> dict:
    """The pretrain section; a steps budget or a schedule of its own only when given, and no `extend` flags, so the
    keys of caches written before these existed still match."""
    pretrain = spec.pretrain.model_dump(mode="json", exclude={"checkpoint"})
    for name in ("steps", "eval_every", "schedule"):
        if pretrain.get(name) is None:
            pretrain.pop(name, None)
    for space in pretrain["search"].values():  # never set on a pretraining (the spec refuses it)
        if isinstance(space, dict):
            space.pop("extend", None)
    return pretrain


def _searcher_key(spec: SweepSpec) -> dict:
    """The searcher's settings; `multivariate` only when on and `batch_size` only when not the default, so the
    keys of caches written before either option existed still match."""
    searcher = spec.searcher.model_dump(mode="json")
    if not searcher["multivariate"]:
        del searcher["multivariate"]
    if searcher["batch_size"] == type(spec.searcher)().batch_size:
        del searcher["batch_size"]
    return searcher


def lookup(cache_dir: Path, key: str) -> Path | None:
    path = cache_dir / key
    return path if (path / STATE_FILE).is_file() else None


def store(cache_dir: Path, key: str, checkpoint: str | Path) -> Path:
    """Copy a selected checkpoint (local, or a URI under a remote --storage) into the campaign's cache."""
    target = cache_dir / key
    if not (target / STATE_FILE).is_file():
        tmp = cache_dir / f".{key}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        storage.copy_dir_to_local(str(checkpoint), tmp)
        tmp.replace(target)  # atomic: a half-copied checkpoint is never found
    return target
