"""Task registry: name -> how to check, load and describe a task's data."""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sptune.errors import DataError, SpecError
from sptune.spec import plugin_refs
from sptune.tasks.arrays import compact_splits, nested_subset
from sptune.tasks.base import TaskSplits
from sptune.tasks.contract import checked_plugin_splits, checked_splits
from sptune.tasks.option_rules import FRACTION, ROW_LIMIT, SEED, Option, check_options, check_order, implied_rule
from sptune.tasks.value_stats import with_value_stats


@dataclass(frozen=True)
class TaskRequest:
    """What a spec asks of a task: its name, options, seed and where data lives."""

    name: str
    options: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    data_dir: Path | None = None

    def option(self, key: str) -> Any:
        return self.options[key]


@dataclass(frozen=True)
class TaskDef:
    name: str
    description: str
    # Allowed spec options with their defaults; unknown options are spec errors.
    defaults: dict[str, Any]
    load: Callable[[TaskRequest], TaskSplits]
    # Raises sptune.errors.DataError naming the missing file and the fix; must be cheap.
    check_available: Callable[[TaskRequest], None]
    # Each option's type and range where its default does not imply them (sptune.tasks.option_rules.implied_rule).
    rules: dict[str, Option] = field(default_factory=dict)

    def rule(self, key: str) -> Option:
        """What option ``key`` accepts: the task's own rule, the one shared by every task, or its default's."""
        return self.rules.get(key) or SHARED_RULES.get(key) or implied_rule(self.defaults[key])


_REGISTRY: dict[str, TaskDef] = {}
# Where each task found outside the package came from (an entry point, an import path); built-ins are absent.
_PLUGIN_ORIGINS: dict[str, str] = {}

# Modules that register tasks on import. Add a module here to add its tasks.
_TASK_MODULES = (
    "sptune.tasks.digits",
    "sptune.tasks.image",
    "sptune.tasks.listops",
    "sptune.tasks.pathfinder",
    "sptune.tasks.text",
    "sptune.tasks.retrieval",
    "sptune.tasks.bits",
    "sptune.tasks.hf",
    "sptune.tasks.array_files",
)


def register(task: TaskDef) -> TaskDef:
    _REGISTRY[task.name] = task
    return task


def _load_modules() -> None:
    for module in _TASK_MODULES:
        importlib.import_module(module)


def task_names() -> list[str]:
    """Built-in tasks and the installed plug-ins' (by entry point name; listing them imports nothing)."""
    _load_modules()
    built_in = {name for name in _REGISTRY if name not in _PLUGIN_ORIGINS}
    return sorted(built_in | set(plugin_refs.installed(plugin_refs.TASK_GROUP)))


def task_origin(name: str) -> str:
    """Where task ``name`` comes from: built-in, or the entry point / import path that provides it."""
    _load_modules()
    if name in _REGISTRY and name not in _PLUGIN_ORIGINS:
        return "built-in"
    if name in _PLUGIN_ORIGINS:
        return _PLUGIN_ORIGINS[name]
    ep = plugin_refs.installed(plugin_refs.TASK_GROUP).get(name)
    return plugin_refs.entry_point_origin(ep) if ep is not None else "unknown"


def is_plugin(name: str) -> bool:
    get_task(name)
    return name in _PLUGIN_ORIGINS


def get_task(name: str) -> TaskDef:
    _load_modules()
    if name in _REGISTRY:
        return _REGISTRY[name]
    found = plugin_refs.find(name, plugin_refs.TASK_GROUP, "task.name")
    if found is None:
        raise SpecError(
            "task.name",
            f"unknown task '{name}'",
            f"use one of: {', '.join(task_names())}; or a plug-in's import path module:attribute "
            f"(see {plugin_refs.GUIDE})",
        )
    # Registered under the name the spec used, so a second lookup neither imports nor checks again.
    _REGISTRY[name] = plugin_refs.expect(found, TaskDef, name, "task.name")
    _PLUGIN_ORIGINS[name] = found.origin
    return _REGISTRY[name]


def resolve_data_dir(explicit: str | os.PathLike | None) -> Path | None:
    """--data-dir wins, then SPTUNE_DATA_DIR, else None (embedded/generated data only)."""
    value = explicit or os.environ.get("SPTUNE_DATA_DIR")
    return Path(value).expanduser() if value else None


# Options every task accepts, handled here rather than by each task.
COMMON_OPTIONS = {"train_fraction": 1.0}
# Rules of options several tasks share under one name.
SHARED_RULES = {"train_fraction": FRACTION, "max_train": ROW_LIMIT, "gen_seed": SEED, "data_seed": SEED}


def _full_request(task: TaskDef, request: TaskRequest) -> TaskRequest:
    options = {k: v for k, v in request.options.items() if k not in COMMON_OPTIONS}
    return TaskRequest(request.name, {**task.defaults, **options}, request.seed, request.data_dir)


def load_task(request: TaskRequest) -> TaskSplits:
    task = get_task(request.name)
    loaded = task.load(_full_request(task, request))
    if request.name in _PLUGIN_ORIGINS:
        loaded = checked_plugin_splits(loaded, f"task.name ({request.name}, {_PLUGIN_ORIGINS[request.name]})")
    splits = compact_splits(checked_splits(loaded))
    return with_value_stats(nested_subset(splits, float(request.options.get("train_fraction", 1.0))))


def check_task(request: TaskRequest) -> None:
    task = get_task(request.name)
    allowed = set(task.defaults) | set(COMMON_OPTIONS)
    unknown = sorted(set(request.options) - allowed)
    if unknown:
        raise SpecError(
            f"task.{unknown[0]}",
            f"unknown option for task '{request.name}'",
            f"allowed options: {', '.join(sorted(allowed))}",
        )
    check_options(request.name, request.options, {key: task.rule(key) for key in request.options})
    check_order({**task.defaults, **request.options})
    if request.data_dir is not None and not request.data_dir.exists():
        # Refused at once: a reader would fall back to the Hugging Face hub (minutes of retries) or generated data.
        raise DataError(f"--data-dir {request.data_dir}", f"no such folder (task '{request.name}' reads its data "
                        "there)", "check the path (--data-dir, or SPTUNE_DATA_DIR), or leave both unset for "
                        "embedded or generated data")
    task.check_available(_full_request(task, request))
