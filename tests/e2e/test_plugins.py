"""The example plug-in package, installed as a user installs it (pip, into a folder of its own on PYTHONPATH, never
into the running environment), swept scratch vs SPT end to end through `python -m sptune.sweep` from a folder
outside the repository: its GRU model family on the built-in digits task, and its generated task with the
built-in transformer; each also through `sptune.run`, to the same findings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers_plugins import install_example
from tests.helpers_results import assert_same_findings, results_of, run_api

pytestmark = pytest.mark.slow

GRID = "search: {lr: {type: grid, values: [3.0e-3]}, batch_size: {type: choice, values: [64]}}"
COMMON = f"""
finetune: {{epochs: 2}}
variants:
  scratch: {{{GRID}}}
  spt: {{{GRID}}}
scheduler: {{type: fifo}}
training: {{warmup_fraction: 0.1}}
resources: {{cpu: 1}}
"""
GRU_ON_DIGITS = f"""name: gru_digits
task: {{name: digits, train_fraction: 0.25}}
model: {{family: gru, d_model: 16, n_layers: 1, dropout: 0.0, pooling: max, options: {{cell: gru}}}}
pretrain: {{objective: masked, mask_ratio: 0.5, loss: l2, epochs: 2, num_samples: 1, {GRID}}}
{COMMON}"""
TRANSFORMER_ON_MAJORITY = f"""name: majority_transformer
task: {{name: majority, n_train: 256, n_val: 64, n_test: 64, seq_len: 16}}
model: {{d_model: 16, n_layers: 1, n_heads: 2, d_ff: 32, dropout: 0.0, pooling: mean}}
pretrain: {{objective: masked, mask_ratio: 0.15, loss: ce, epochs: 2, num_samples: 1, {GRID}}}
{COMMON}"""


STUDIES = ("gru_digits", "majority")


@pytest.fixture(scope="module")
def user(tmp_path_factory, repo_root):
    """A user's folder outside the repository, and the environment with the plug-in on PYTHONPATH."""
    home = tmp_path_factory.mktemp("plugin_user")
    target = install_example(home / "site")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), repo_root]), "HF_HUB_OFFLINE": "1"}
    return home, env


@pytest.fixture(scope="module")
def swept(user) -> tuple[dict[str, dict], str, Path]:
    """Both studies as one campaign (one Ray start per front end) through the command line, then through
    `sptune.run`: the CLI's results per study, what it printed, and the user's folder."""
    home, env = user
    (home / "gru_digits.yaml").write_text(GRU_ON_DIGITS)
    (home / "majority.yaml").write_text(TRANSFORMER_ON_MAJORITY)
    (home / "plugins.yaml").write_text("campaign: plugins\nstudies:\n  - spec: gru_digits.yaml\n    name: gru_digits\n"
                                       "  - spec: majority.yaml\n    name: majority\n")
    done = subprocess.run([sys.executable, "-m", "sptune.sweep", "plugins.yaml", "--output", "cli"], cwd=home, env=env,
                          capture_output=True, text=True, timeout=420)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run_api(home, env, "plugins.yaml", "api")
    return {name: results_of(home / "cli" / name) for name in STUDIES}, done.stdout, home


def _encoder_weights(out: Path) -> set[str]:
    """The encoder parameter names of one of the study's saved checkpoints."""
    state = next(out.rglob("state.pt"))
    return set(torch.load(state, map_location="cpu", weights_only=True)["model"])


def _tested(results: dict) -> set[str]:
    return {row["variant"] for row in results["rows"] if row.get("test_acc") is not None}


def test_the_plugins_model_family_sweeps_scratch_vs_spt_on_a_built_in_task(swept):
    results, printed, home = swept
    assert "Model: plug-in family 'gru' from entry point sptune.models:gru" in printed
    assert _tested(results["gru_digits"]) == {"scratch", "spt"}
    assert any(".forward_rnn." in name for name in _encoder_weights(home / "cli" / "gru_digits"))  # the GRU trained


def test_the_plugins_task_sweeps_scratch_vs_spt_with_a_built_in_model(swept):
    results, printed, _ = swept
    assert "on task 'majority'" in printed and "from entry point sptune.tasks:majority" in printed
    assert _tested(results["majority"]) == {"scratch", "spt"}


@pytest.mark.parametrize("study", STUDIES)
def test_sptune_run_finds_what_the_command_line_found(swept, study):
    results, _, home = swept
    assert_same_findings(results_of(home / "api" / study), results[study])


def test_sptune_data_info_lists_the_plugins_beside_the_built_ins(user):
    home, env = user
    done = subprocess.run([sys.executable, "-m", "sptune.data", "info", "--json"], cwd=home, env=env,
                          capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    found = json.loads(done.stdout)
    tasks = {t["name"]: t for t in found["tasks"]}
    families = {f["name"]: f["origin"] for f in found["model_families"]}
    assert tasks["digits"]["origin"] == "built-in" and families["transformer"] == "built-in"
    assert tasks["majority"]["origin"].startswith("entry point sptune.tasks:majority = sptune_example_plugin")
    assert "symbol 2" in tasks["majority"]["description"]
    assert families["gru"].endswith("sptune_example_plugin.models:GRU of sptune-example-plugin 0.1.0")
