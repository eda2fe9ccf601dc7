"""The one test evaluation runs on the device and in the precision the selected trial trained with."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from sptune.spec import load_spec
from sptune.tasks.base import ArraySplit, TaskInfo
from sptune.training.final_scores import accuracy_on, accuracy_on_test, trial_device_and_precision
from sptune.training.model_configs import variant_classifier_config
from sptune.training.scoring import score as score_model
from sptune.training.variants import build_for_evaluation

INFO = TaskInfo("digits", "continuous", 64, 10, levels=17)
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _spec(repo_root: str, *overrides: str):
    return load_spec(Path(repo_root) / "search_spaces" / "digits_quick.yaml", ["model.n_layers=1", *overrides])


def _checkpoint(spec, folder: Path, **record: str) -> torch.nn.Module:
    torch.manual_seed(0)
    model = build_for_evaluation(spec.variant_kind("scratch"), variant_classifier_config(spec, INFO, "scratch"), None)
    folder.mkdir()
    torch.save({"model": model.state_dict(), **record}, folder / "state.pt")
    return model


def test_a_bf16_trials_checkpoint_is_tested_in_bf16_whatever_the_drivers_default(repo_root, tmp_path):
    spec = _spec(repo_root)  # training.precision auto: fp32 on this CPU driver
    model = _checkpoint(spec, tmp_path / "ck", device_in_use="cpu", precision_in_use="bf16")
    rng = np.random.default_rng(0)
    test = ArraySplit(rng.integers(0, 17, (64, 64)).astype("int64"), rng.integers(0, 10, 64))
    score = accuracy_on_test(spec, INFO, str(tmp_path / "ck"), test, "scratch")
    assert (score.device, score.precision) == ("cpu", "bf16")
    x, y = torch.from_numpy(test.x), torch.from_numpy(test.y)
    bf16 = score_model(model, INFO, x, y, torch.device("cpu"), "bf16")
    fp32 = score_model(model, INFO, x, y, torch.device("cpu"), "fp32")
    assert (score.loss, score.accuracy) == bf16 and score.loss != fp32[0]


def test_without_a_record_the_specs_settings_resolve_as_in_a_trial(repo_root):
    # A trial that asks Ray for no GPU sees none: "auto" is the CPU there, whatever the driver has.
    assert trial_device_and_precision(_spec(repo_root), {}) == ("cpu", "fp32")
    assert trial_device_and_precision(_spec(repo_root, "training.device=cpu", "training.precision=bf16"), {}) == (
        "cpu", "bf16")
    assert trial_device_and_precision(_spec(repo_root), {"device_in_use": "cuda", "precision_in_use": "bf16"}) == (
        "cuda", "bf16")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the fallback for a driver without the trial's GPU")
def test_a_gpu_trials_checkpoint_on_a_driver_without_one_is_tested_on_the_cpu_in_its_precision(repo_root, tmp_path):
    spec = _spec(repo_root)
    _checkpoint(spec, tmp_path / "ck", device_in_use="cuda", precision_in_use="bf16")
    test = ArraySplit(np.zeros((8, 64), dtype="int64"), np.zeros(8, dtype="int64"))
    score = accuracy_on_test(spec, INFO, str(tmp_path / "ck"), test, "scratch")
    assert (score.device, score.precision) == ("cpu", "bf16")


def test_train_accuracy_is_the_checkpoint_in_eval_mode_on_the_first_training_rows(repo_root, tmp_path):
    """Coser & Orvieto's fit of the training data: the stored weights, dropout off, on a fixed sample of rows."""
    from sptune.study.final_evaluation import TRAIN_SAMPLE, train_sample
    from sptune.tasks import TaskRequest, load_task

    spec = _spec(repo_root, "model.dropout=0.5")  # dropout on would make a train-mode score vary
    model = _checkpoint(spec, tmp_path / "ck", device_in_use="cpu", precision_in_use="fp32")
    data = load_task(TaskRequest("digits"))
    rows = train_sample(data)
    assert len(rows) == min(TRAIN_SAMPLE, len(data.train)) and (rows.x == data.train.x[: len(rows)]).all()
    first = accuracy_on(spec, INFO, str(tmp_path / "ck"), rows, "scratch")
    second = accuracy_on(spec, INFO, str(tmp_path / "ck"), rows, "scratch")
    assert first == second  # eval mode: no dropout noise
    x, y = torch.from_numpy(rows.x), torch.from_numpy(rows.y)
    assert first.accuracy == score_model(model, INFO, x, y, torch.device("cpu"), "fp32")[1]
