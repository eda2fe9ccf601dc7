"""Predictors that need no training, scored on SPT's own validation masks (sptune.training.trivial_predictors,
sptune.training.trivial_scores)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sptune.tasks.base import ArraySplit, TaskInfo
from sptune.training.loops import OptimConfig, PretrainLoop, PretrainObjective
from sptune.training.models.encoder import EncoderConfig
from sptune.training.trivial_predictors import masked_predictions, most_frequent_token, next_element_predictions
from sptune.training.trivial_scores import TrivialScores

IMAGE = TaskInfo(name="px", input_kind="continuous", seq_len=9, num_classes=2, levels=9, image_side=3)
TOKENS = TaskInfo(name="tok", input_kind="tokens", seq_len=6, num_classes=2, vocab_size=12, pad_id=0, mask_id=1)


def test_the_neighbour_average_reads_the_visible_four_neighbours_of_an_image():
    x = torch.arange(9).reshape(1, 9)  # 0 1 2 / 3 4 5 / 6 7 8 (levels 9: values x / 8)
    where = torch.zeros(1, 9, dtype=torch.bool)
    where[0, 4] = where[0, 1] = True  # the centre and its upper neighbour hidden
    guess = masked_predictions(x, where, IMAGE)
    assert guess["neighbour_mean"][0, 4].item() == pytest.approx((3 + 5 + 7) / 3 / 8)  # 1 is hidden: not used
    assert guess["neighbour_mean"][0, 1].item() == pytest.approx((0 + 2) / 2 / 8)  # 4 hidden too
    assert guess["visible_mean"][0, 4].item() == pytest.approx((36 - 4 - 1) / 7 / 8)


def test_a_one_dimensional_sequence_uses_its_left_and_right_values():
    info = TaskInfo(name="seq", input_kind="continuous", seq_len=5, num_classes=2, levels=9)
    x = torch.tensor([[0, 8, 4, 2, 6]])
    where = torch.tensor([[False, False, True, False, True]])
    guess = masked_predictions(x, where, info)["neighbour_mean"]
    assert guess[0, 2].item() == pytest.approx((8 + 2) / 2 / 8)
    assert guess[0, 4].item() == pytest.approx(2 / 8)  # only its left neighbour exists and is visible


def test_tokens_copy_the_nearest_visible_token_and_skip_padding():
    x = torch.tensor([[5, 6, 7, 8, 0, 0]])  # two pads at the end
    where = torch.tensor([[False, True, True, False, False, False]])
    guess = masked_predictions(x, where, TOKENS, most_frequent=9)
    assert guess["nearest_visible"][0, 1].item() == 5 and guess["nearest_visible"][0, 2].item() == 8
    assert (guess["most_frequent"] == 9).all()
    assert most_frequent_token(torch.tensor([[2, 2, 3, 0, 0, 0, 1, 1, 1]]), TOKENS) == 2  # pad and mask ids skipped


def test_next_element_predictors_repeat_the_current_element():
    x = torch.tensor([[3, 4, 4, 7]])
    assert next_element_predictions(x, TOKENS, most_frequent=4)["repeat_last"].tolist() == [[3, 4, 4, 7]]


def test_scores_are_in_the_objectives_unit_and_the_best_is_the_lowest_loss():
    x = torch.arange(9).reshape(1, 9)
    where = torch.zeros(1, 9, dtype=torch.bool)
    where[0, 4] = True
    scores = TrivialScores(IMAGE, PretrainObjective("masked", 0.5, "l1"), 0)
    scores.add(x, where)
    means = scores.means()
    assert means["trivial_neighbour_mean_loss"] == pytest.approx(0.0)  # (1 + 3 + 5 + 7) / 4 = 4: exact
    assert means["trivial_visible_mean_loss"] == pytest.approx(0.0)  # the mean of the rest is 4 too
    assert means["trivial_best"] == min(v for k, v in means.items() if k != "trivial_best")
    hits = TrivialScores(TOKENS, PretrainObjective("masked", 0.5, "ce"), 0)
    hits.add(torch.tensor([[5, 5, 7, 8, 0, 0]]), torch.tensor([[False, True, True, False, False, False]]))
    assert hits.means()["trivial_nearest_visible_acc"] == pytest.approx(0.5)  # 5 from 5: right; 7 from 8: wrong


def test_a_pretraining_reports_the_trivial_scores_on_its_own_validation_masks():
    info = TaskInfo(name="px", input_kind="continuous", seq_len=16, num_classes=2, levels=17, image_side=4)
    rng = np.random.default_rng(0)
    train = ArraySplit(rng.integers(0, 17, (32, 16)).astype("int64"), rng.integers(0, 2, 32))
    val = ArraySplit(rng.integers(0, 17, (16, 16)).astype("int64"), rng.integers(0, 2, 16))
    cfg = OptimConfig(lr=1e-3, batch_size=8, epochs=2, seed=1, device="cpu")
    encoder = EncoderConfig(d_model=16, n_layers=1, n_heads=2, d_ff=32, max_len=16)
    loop = PretrainLoop(encoder, PretrainObjective("masked", 0.5, "l1"), info, train, val, cfg)
    first, second = loop.train_epoch(), loop.train_epoch()
    keys = {"trivial_visible_mean_loss", "trivial_neighbour_mean_loss", "trivial_best"}
    assert keys <= set(first) and all(first[k] == second[k] for k in keys)  # the same masks every epoch
    # Recomputed by hand on the same fixed validation masks: the loop's seeded generator, replayed.
    generator = torch.Generator().manual_seed(loop.val_generator_seed)
    x = torch.from_numpy(val.x)
    where = torch.rand(x.shape, generator=generator) < 0.5
    guess = masked_predictions(x, where, info)["neighbour_mean"]
    by_hand = (guess - x / 16).abs()[where].mean().item()
    assert first["trivial_neighbour_mean_loss"] == pytest.approx(by_hand, rel=1e-6)
