"""Variants through a real study: spt_cross pretrains on another task, spt_frozen logs which parameters train."""

from __future__ import annotations

import json

from sptune.training.model_configs import encoder_config, variant_classifier_config
from sptune.training.models import Pretrainer
from sptune.training.variants import build_model, trainable_summary
from tests.helpers_tiny import child_runs, run_spec_text
from tests.training.test_variants import CROSS_SPEC, _fpt_trainable


def test_spt_cross_pretrains_on_the_other_task_and_logs_the_mapping(ray_session, tmp_path, monkeypatch):
    monkeypatch.setenv("SPTUNE_CACHE_DIR", str(tmp_path / "cache"))
    _, out, _ = run_spec_text(tmp_path, CROSS_SPEC.replace("SOURCE", "pathfinder"), "cross")
    stages = {json.loads(t.read_text())["stage"] for t in (out / "ray_results" / "study").glob("*/params.json")}
    assert "pretrain-on-pathfinder-gen_n120" in stages  # a stage of the study's one Tuner
    runs = child_runs(out)
    (pretrain,) = [r for r in runs if r.data.tags["sptune.phase"] == "pretrain"]
    (finetune,) = [r for r in runs if r.data.tags["sptune.phase"] == "search"]
    assert pretrain.data.params["task"] == "pathfinder" and finetune.data.params["task"] == "digits"
    copied = finetune.data.params["init_copied"].split(",")
    reinitialised = finetune.data.params["init_reinitialised"].split(",")
    assert "blocks.0.attn.query.weight" in copied and "embed.weight" in copied
    assert reinitialised == ["positions"]  # 1,024 pathfinder pixels vs 64 digit pixels


FROZEN_STUDY = """
name: frozen
task: {name: digits}
model: {d_model: 32, n_layers: 1, n_heads: 4, d_ff: 64, pooling: mean}
pretrain:
  loss: l2
  epochs: 1
  num_samples: 1
  search: {lr: {type: grid, values: [1.0e-3]}, batch_size: {type: choice, values: [64]}}
finetune: {epochs: 1, num_samples: 1}
variants:
  spt_frozen:
    search: {lr: {type: grid, values: [1.0e-3]}, batch_size: {type: choice, values: [64]}}
scheduler: {type: fifo}
"""


def test_spt_frozen_study_logs_which_parameters_train(ray_session, tmp_path):
    """Through the real study: the finetuning run of spt_frozen logs exactly the parameters its builder trains."""
    from sptune.spec import load_spec
    from sptune.tasks import TaskRequest, load_task

    spec_path, out, _ = run_spec_text(tmp_path, FROZEN_STUDY, "frozen")
    runs = child_runs(out)
    (finetune,) = [r for r in runs if r.data.tags["sptune.phase"] == "search"]
    spec = load_spec(spec_path)
    info = load_task(TaskRequest("digits", spec.task.options, spec.seed, None)).info
    model = build_model("spt_frozen", variant_classifier_config(spec, info, "spt_frozen"),
                        Pretrainer(encoder_config(spec.model, info), 1).state_dict())
    expected = trainable_summary(model)
    assert set(finetune.data.params["trainable_names"].split(",")) == set(expected["trainable_names"])
    assert all(_fpt_trainable(n) for n in expected["trainable_names"])
    assert finetune.data.metrics["trainable_params"] == expected["trainable_params"] < expected["total_params"]
    assert finetune.data.metrics["total_params"] == expected["total_params"]
