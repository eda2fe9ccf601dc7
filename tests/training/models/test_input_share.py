"""Every task's default model sees its input: at initialisation at least 30 % of the variance of the first
block's input varies with the example (sptune.training.models.input_share), on the task's own data.

A learned N(0, 1) position table beside raw [0, 1] pixels left 0.8 % to the image; the checks below fail for
that encoding (test_the_old_pixel_encoding_was_nearly_blind)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch
from sklearn.datasets import load_sample_images

from sptune.spec.sections import ModelSpec
from sptune.spec.task_defaults import TASK_DEFAULTS, task_defaults
from sptune.tasks.image import to_gray
from sptune.tasks.registry import TaskRequest, load_task
from sptune.tasks.text import generate_synthetic_imdb
from sptune.training import objectives as obj
from sptune.training.model_configs import classifier_config
from sptune.training.models import Classifier
from sptune.training.models.encoder import Encoder, EncoderConfig
from sptune.training.models.input_share import data_variance_share, encoder_data_share

MIN_SHARE = 0.30
ROWS = 64

# Offline data for each task: generated sets at a small size, or files written in the real format.
GENERATED = {
    "listops": {"gen_n_train": 80, "gen_n_val": 10, "gen_n_test": 10},
    "retrieval": {"gen_n_train": 80, "gen_n_val": 10, "gen_n_test": 10},
    "pathfinder": {"gen_n": 80},
    "pathx": {"gen_n": 12},
}


def _image_npz(folder) -> None:
    """32 x 32 patches of scikit-learn's two bundled photographs (natural images, as CIFAR's are), made grey as
    the task does, in the CIFAR .npz layout the image task reads; labels are arbitrary."""
    photos = load_sample_images().images
    patches = [photo[r:r + 32, c:c + 32] for photo in photos
               for r in range(0, photo.shape[0] - 31, 32) for c in range(0, photo.shape[1] - 31, 32)]
    x = to_gray(np.stack(patches))
    y = np.arange(len(x)) % 10
    np.savez(folder / "cifar10_gray.npz", x_train=x, y_train=y, x_test=x[:10], y_test=y[:10])


def _task(name: str, tmp_path) -> TaskRequest:
    if name == "image":
        _image_npz(tmp_path)
        return TaskRequest("image", {"n_val": 100}, 0, tmp_path)
    if name == "text":
        generate_synthetic_imdb(tmp_path, seed=0, n_train=200, n_test=10)
        return TaskRequest("text", {"n_val": 20, "max_len": 256}, 0, tmp_path)
    return TaskRequest(name, GENERATED.get(name, {}))


@pytest.mark.parametrize("name", sorted(TASK_DEFAULTS))
def test_every_task_default_model_sees_its_data(name, tmp_path, monkeypatch):
    monkeypatch.setenv("SPTUNE_CACHE_DIR", str(tmp_path / "cache"))
    splits = load_task(_task(name, tmp_path))
    info = splits.info
    model = ModelSpec(**task_defaults(name).get("model", {}))
    torch.manual_seed(0)
    classifier = Classifier(classifier_config(model, info))
    rows = np.linspace(0, len(splits.train) - 1, ROWS).astype(int)  # spread over the split (no run of one photo's sky)
    x = torch.from_numpy(np.asarray(splits.train.x[rows]))
    if info.paired:
        x = x[:, 0]  # each document is encoded on its own
    share = encoder_data_share(classifier.encoder, obj.model_inputs(x, info), obj.padding_of(x, info))
    assert share >= MIN_SHARE, f"{name}: only {share:.1%} of the first block's input depends on the data"


def test_the_old_pixel_encoding_was_nearly_blind(tmp_path):
    """Raw [0, 1] pixels with a unit-scale learned table (the encoding before): far below the bar, so the
    check above can fail."""
    _image_npz(tmp_path)
    splits = load_task(TaskRequest("image", {"n_val": 100}, 0, tmp_path))
    raw = replace(splits.info, value_mean=0.0, value_std=1.0)
    torch.manual_seed(0)
    encoder = Encoder(EncoderConfig(positions="learned", max_len=1024, n_layers=1))
    with torch.no_grad():
        encoder.positions.normal_(std=1.0)
    x = torch.from_numpy(splits.train.x[:ROWS])
    assert encoder_data_share(encoder, obj.model_inputs(x, raw)) < 0.05


def test_data_share_splits_variance_into_example_and_position_parts():
    torch.manual_seed(0)
    position = torch.randn(1, 16, 8).expand(32, -1, -1)
    example = torch.randn(32, 16, 8)
    assert data_variance_share(position) == pytest.approx(0.0, abs=1e-12)
    assert data_variance_share(example) == pytest.approx(1.0, abs=0.05)
    assert data_variance_share(position + example) == pytest.approx(0.5, abs=0.1)
