"""sptune's CPU dropout: PyTorch's maths (keep probability, scaling, gradient), a cheaper mask."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from sptune.training.models import Classifier, ModelConfig
from sptune.training.models.dropout import Dropout
from sptune.training.models.encoder import EncoderConfig


def _train_mode(p: float) -> Dropout:
    return Dropout(p).train()


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_the_keep_fraction_is_one_minus_p(p):
    torch.manual_seed(0)
    n = 1_000_000
    kept = float((_train_mode(p)(torch.ones(n)) != 0).float().mean())
    five_sigma = 5 * math.sqrt(p * (1 - p) / n)
    assert abs(kept - (1 - p)) < five_sigma, (kept, 1 - p)


def test_kept_values_are_scaled_exactly_as_pytorch_scales_them_and_the_rest_are_zero():
    torch.manual_seed(1)
    x = torch.randn(64, 128)
    out = _train_mode(0.1)(x)
    kept = out != 0
    scale = torch.ones(()).div_(0.9)  # PyTorch's noise: a float32 one divided by (1 - p)
    assert torch.equal(out[kept], x[kept] * scale)
    assert 0 < int(kept.sum()) < x.numel()


def test_the_gradient_is_the_same_mask_and_scale():
    torch.manual_seed(2)
    x = torch.randn(32, 16, requires_grad=True)
    out = _train_mode(0.25)(x)
    upstream = torch.randn_like(out)
    out.backward(upstream)
    mask = (out != 0).float()
    assert torch.equal(x.grad, upstream * (mask * torch.ones(()).div_(0.75)))


def test_the_seed_decides_the_mask():
    def mask(seed: int) -> torch.Tensor:
        torch.manual_seed(seed)
        return _train_mode(0.3)(torch.ones(10_000)) != 0

    assert torch.equal(mask(7), mask(7))
    assert not torch.equal(mask(7), mask(8))


def test_masks_are_independent_of_position():
    """Neighbouring elements' keep decisions are not correlated (each has its own draw)."""
    torch.manual_seed(3)
    kept = (_train_mode(0.5)(torch.ones(2_000_000)) != 0).float()
    correlation = torch.corrcoef(torch.stack([kept[:-1], kept[1:]]))[0, 1]
    assert abs(float(correlation)) < 5 / math.sqrt(len(kept))


def test_eval_mode_and_the_edge_rates_are_pytorchs():
    x = torch.randn(100)
    assert torch.equal(Dropout(0.5).eval()(x), x)
    assert torch.equal(_train_mode(0.0)(x), x)
    assert torch.equal(_train_mode(1.0)(x), torch.zeros_like(x))


def test_in_place_dropout_is_pytorchs_own():
    """In place (which the cheaper mask does not do), it is PyTorch's dropout: the same mask from the same stream."""
    x = torch.randn(1000)
    torch.manual_seed(4)
    ours = Dropout(0.2, inplace=True).train()(x.clone())
    torch.manual_seed(4)
    assert torch.equal(ours, nn.functional.dropout(x, 0.2, training=True))


def test_the_cheap_mask_is_not_pytorchs_stream():
    """The point of the module: it does not call bernoulli_ (which would give PyTorch's exact mask)."""
    x = torch.randn(1000)
    torch.manual_seed(5)
    ours = _train_mode(0.2)(x)
    torch.manual_seed(5)
    assert not torch.equal(ours, nn.functional.dropout(x, 0.2, training=True))


@pytest.mark.parametrize("family", ["transformer", "ssm"])
def test_every_dropout_in_the_models_is_sptunes(family):
    model = Classifier(ModelConfig(encoder=EncoderConfig(family=family, max_len=16), num_classes=3))
    dropouts = [m for m in model.modules() if isinstance(m, nn.Dropout)]
    assert dropouts and all(type(m) is Dropout for m in dropouts)
