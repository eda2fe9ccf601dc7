"""Plug-ins found by entry point (an installed distribution's metadata on sys.path) and by import path, and the
refusals naming what does not import."""

from __future__ import annotations

import sys
import textwrap

import pytest

from sptune.errors import SpecError
from sptune.spec import plugin_refs
from sptune.tasks import registry
from sptune.tasks.registry import TaskDef, get_task, is_plugin, task_names, task_origin

TASK_MODULE = """
import numpy as np
from sptune.plugins import ArraySplit, TaskDef, TaskInfo, TaskSplits

def load(request):
    x = np.full((8, 4), 2, dtype=np.int64)
    y = np.arange(8) % 2
    return TaskSplits(TaskInfo("tiny", "tokens", 4, 2, vocab_size=3), ArraySplit(x, y), ArraySplit(x, y),
                      lambda: ArraySplit(x, y))

TINY = TaskDef("tiny", "a tiny test task", {}, load, lambda request: None)
"""


@pytest.fixture(autouse=True)
def own_registry(monkeypatch):
    """Plug-ins registered here stay out of the registry other tests read."""
    registry.task_names()
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    monkeypatch.setattr(registry, "_PLUGIN_ORIGINS", dict(registry._PLUGIN_ORIGINS))


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """A distribution 'fake-plugin' declaring task 'tiny_ep' and a broken one, found on sys.path."""
    (tmp_path / "fake_plugin_mod.py").write_text(TASK_MODULE)
    (tmp_path / "broken_plugin_mod.py").write_text("raise RuntimeError('boom at import')\n")
    info = tmp_path / "fake_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        textwrap.dedent("""\
        [sptune.tasks]
        tiny_ep = fake_plugin_mod:TINY
        broken_ep = broken_plugin_mod:TINY
        """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in ("fake_plugin_mod", "broken_plugin_mod"):
        sys.modules.pop(name, None)


def test_an_installed_entry_point_is_listed_without_importing_and_found_by_name(installed):
    assert {"tiny_ep", "broken_ep", "digits"} <= set(task_names())
    assert "fake_plugin_mod" not in sys.modules  # listing reads metadata only
    assert task_origin("tiny_ep") == "entry point sptune.tasks:tiny_ep = fake_plugin_mod:TINY of fake-plugin 0.1"
    task = get_task("tiny_ep")
    assert isinstance(task, TaskDef) and task.name == "tiny" and is_plugin("tiny_ep")
    assert task_origin("digits") == "built-in" and not is_plugin("digits")


def test_an_import_path_is_found_without_installing(installed):
    task = get_task("fake_plugin_mod:TINY")
    assert task.description == "a tiny test task"
    assert "fake_plugin_mod:TINY" not in task_names()  # the spec names it; the listing shows what is installed
    assert task_origin("fake_plugin_mod:TINY") == "import path fake_plugin_mod:TINY"


def test_an_entry_point_whose_module_raises_is_named_with_its_package(installed):
    with pytest.raises(
        SpecError,
        match=r"broken_ep = broken_plugin_mod:TINY of fake-plugin 0.1 fails to load: "
        r"RuntimeError: boom at import",
    ) as err:
        get_task("broken_ep")
    assert err.value.where == "task.name" and "pip uninstall fake-plugin" in err.value.fix


def test_an_import_path_that_does_not_import_names_the_module_and_the_fix():
    with pytest.raises(SpecError, match="names module 'no_such_pkg.tasks', which does not import") as err:
        get_task("no_such_pkg.tasks:TASK")
    assert "PYTHONPATH" in err.value.fix and "package.module:attribute" in err.value.fix


def test_a_missing_attribute_and_a_malformed_path_are_named(installed):
    with pytest.raises(SpecError, match="module 'fake_plugin_mod' has no attribute 'NOPE'"):
        get_task("fake_plugin_mod:NOPE")
    with pytest.raises(SpecError, match="not an import path of the form module:attribute"):
        plugin_refs.load_reference("fake_plugin_mod:", "task.name")


def test_an_object_of_the_wrong_type_is_refused(installed):
    with pytest.raises(
        SpecError,
        match=r"'fake_plugin_mod:load' \(import path fake_plugin_mod:load\) is a "
        r"function, not a sptune.plugins.TaskDef",
    ):
        get_task("fake_plugin_mod:load")


def test_an_unknown_name_lists_the_installed_plugins_too(installed):
    with pytest.raises(SpecError, match="unknown task 'nope'") as err:
        get_task("nope")
    assert "tiny_ep" in err.value.fix and "module:attribute" in err.value.fix
