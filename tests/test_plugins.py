"""The public plug-in surface (sptune.plugins), and the example package honouring it: its task through the
registry by import path, its GRU family through the dry run's check (causal kinds included)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import sptune.plugins as plugins
from sptune.errors import SpecError
from sptune.spec import load_spec
from sptune.tasks import holdout
from sptune.tasks.registry import TaskRequest, load_task, task_origin
from tests.helpers_plugins import EXAMPLE

REPO = Path(__file__).resolve().parents[1]
DIGITS = REPO / "search_spaces" / "digits_quick.yaml"


@pytest.fixture
def example_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))
    yield
    for name in [m for m in sys.modules if m.startswith("sptune_example_plugin")]:
        sys.modules.pop(name)


def test_the_public_names_and_a_task_plugin_stays_torch_free():
    assert set(plugins.__all__) >= {"TaskDef", "TaskSplits", "TaskInfo", "ArraySplit", "ModelFamily", "ModelSection"}
    assert plugins.ModelFamily.__module__ == "sptune.training.models.families"
    code = "import sys, sptune.plugins as p; p.TaskDef; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_the_example_task_keeps_the_contract_and_seals_its_test_split(example_on_path):
    name = "sptune_example_plugin.tasks:MAJORITY"
    splits = load_task(TaskRequest(name, {"n_train": 40, "n_val": 10, "n_test": 12, "seq_len": 8}))
    assert task_origin(name) == f"import path {name}"
    assert splits.info.input_kind == "tokens" and splits.train.x.shape == (40, 8) and len(splits.val) == 10
    assert (splits.train.x >= 2).all() and set(splits.train.y) <= {0, 1}
    with pytest.raises(holdout.SealedSplitError):
        assert splits.test is None  # raises first
    with holdout.final_evaluation():
        assert len(splits.test) == 12


@pytest.mark.parametrize("sets", [(), ("pretrain.objective=causal",), ("model.options.cell=lstm",)])
def test_the_example_gru_passes_the_dry_runs_check(example_on_path, sets):
    from sptune.tasks.base import TaskInfo
    from sptune.training.models.family_check import check_plugin_family

    spec = load_spec(DIGITS, ["model.family=sptune_example_plugin.models:GRU", "model.d_model=8", *sets])
    family = check_plugin_family(spec, TaskInfo("px", "continuous", 12, 10))
    assert family.name == "gru" and family.causal


def test_the_example_gru_refuses_an_unknown_cell_naming_its_option(example_on_path):
    from sptune.tasks.base import TaskInfo
    from sptune.training.models.family_check import check_plugin_family

    spec = load_spec(DIGITS, ["model.family=sptune_example_plugin.models:GRU", "model.options.cell=rnn"])
    with pytest.raises(SpecError, match="unknown cell 'rnn'") as err:
        check_plugin_family(spec, TaskInfo("px", "continuous", 12, 10))
    assert err.value.where == "model.options.cell"
