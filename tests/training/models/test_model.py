"""Model shapes for every pooling, both input kinds, paired inputs and the SPT handoff."""

from __future__ import annotations

import math

import pytest
import torch

from sptune.spec import ModelSpec
from sptune.tasks.base import TaskInfo
from sptune.training import objectives as obj
from sptune.training.model_configs import classifier_config, encoder_config
from sptune.training.models import Classifier, ModelConfig, Pretrainer
from sptune.training.variants import build_model

PIXELS = TaskInfo(name="px", input_kind="continuous", seq_len=64, num_classes=10, levels=17)
TOKENS = TaskInfo(name="tok", input_kind="tokens", seq_len=48, num_classes=7, vocab_size=30)
PAIRED = TaskInfo(name="pair", input_kind="tokens", seq_len=32, num_classes=2, vocab_size=30, paired=True)


@pytest.mark.parametrize("pooling", ["mean", "max", "last", "cls"])
@pytest.mark.parametrize("positions", ["sinusoidal", "learned", "rotary"])
@pytest.mark.parametrize("info", [PIXELS, TOKENS], ids=["pixels", "tokens"])
def test_classifier_shapes(pooling, positions, info):
    spec = ModelSpec(d_model=32, n_layers=2, n_heads=4, d_ff=64, pooling=pooling, positions=positions)
    model = Classifier(classifier_config(spec, info))
    x = torch.randint(2, 17, (5, info.seq_len))
    x[:, -5:] = 0 if info.input_kind == "tokens" else x[:, -5:]
    logits = model(obj.model_inputs(x, info), obj.padding_of(x, info))
    assert logits.shape == (5, info.num_classes)
    assert torch.isfinite(logits).all()


def test_padding_does_not_change_pooled_outputs():
    """The same sequence with 8 or 2 trailing pads gives the same logits (pads are masked out)."""
    spec = ModelSpec(d_model=32, n_layers=2, n_heads=4, d_ff=64, pooling="mean", dropout=0.0)
    model = Classifier(classifier_config(spec, TOKENS)).eval()
    x = torch.randint(4, 30, (1, TOKENS.seq_len))
    x[:, 40:] = 0
    shorter = x[:, :42]
    out_long = model(obj.model_inputs(x, TOKENS), obj.padding_of(x, TOKENS))
    out_short = model(obj.model_inputs(shorter, TOKENS), obj.padding_of(shorter, TOKENS))
    assert torch.allclose(out_long, out_short, atol=1e-5)
    # Without the padding mask the pads would leak into attention and pooling.
    assert not torch.allclose(out_long, model(obj.model_inputs(x, TOKENS), None), atol=1e-5)


def test_paired_classifier_shape():
    spec = ModelSpec(d_model=32, n_layers=1, n_heads=4, d_ff=64, pooling="mean")
    model = Classifier(classifier_config(spec, PAIRED))
    x = torch.randint(4, 30, (3, 2, PAIRED.seq_len))
    assert model(obj.model_inputs(x, PAIRED), None).shape == (3, 2)


@pytest.mark.parametrize("loss,out_dim", [("ce", 17), ("l2", 1), ("l1", 1)])
def test_pretrainer_shapes(loss, out_dim):
    spec = ModelSpec(d_model=32, n_layers=1, n_heads=4, d_ff=64)
    model = Pretrainer(encoder_config(spec, PIXELS), obj.output_dim(PIXELS, loss))
    x = torch.randint(0, 17, (4, 64))
    mask = obj.draw_mask(x.shape, 0.5, torch.Generator().manual_seed(0))
    assert model(obj.model_inputs(x, PIXELS, mask)).shape == (4, 64, out_dim)
    assert model(obj.model_inputs(x, PIXELS), causal=True).shape == (4, 64, out_dim)


@pytest.mark.parametrize("loss", ["l2", "l1"])
def test_a_regressed_value_stays_fp32_under_bf16_autocast(loss):
    spec = ModelSpec(d_model=32, n_layers=1, n_heads=4, d_ff=64)
    model = Pretrainer(encoder_config(spec, PIXELS), obj.output_dim(PIXELS, loss))
    x = torch.randint(0, 17, (2, 64))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert model(obj.model_inputs(x, PIXELS)).dtype == torch.float32


def test_causal_attention_ignores_the_future():
    spec = ModelSpec(d_model=32, n_layers=2, n_heads=4, d_ff=64, dropout=0.0)
    model = Pretrainer(encoder_config(spec, TOKENS), TOKENS.vocab_size).eval()
    x = torch.randint(4, 30, (1, TOKENS.seq_len))
    y = x.clone()
    y[:, 30:] = 5
    a, b = model(x, causal=True), model(y, causal=True)
    assert torch.allclose(a[:, :30], b[:, :30], atol=1e-5) and not torch.allclose(a[:, 30:], b[:, 30:])


def test_spt_variant_copies_the_whole_encoder():
    spec = ModelSpec(d_model=32, n_layers=2, n_heads=4, d_ff=64)
    pre = Pretrainer(encoder_config(spec, PIXELS), 1)
    model = build_model("spt", classifier_config(spec, PIXELS), pre.state_dict())
    for name, tensor in pre.encoder.state_dict().items():
        assert torch.equal(model.encoder.state_dict()[name], tensor), name
    scratch = build_model("scratch", classifier_config(spec, PIXELS))
    assert not torch.equal(scratch.encoder.embed.weight, pre.encoder.embed.weight)


def test_ssm_layer_is_the_convolution_it_claims():
    """FFT convolution == the direct sum over the SSM kernel, both directions; causal hides the future."""
    from sptune.training.models.ssm import DiagonalSSM

    torch.manual_seed(0)
    layer = DiagonalSSM(8, 16)
    u = torch.randn(2, 40, 8)
    k_fwd, k_bwd = layer.kernel(40)
    zero = torch.zeros(2, 8)
    forward = torch.stack([sum((k_fwd[:, j] * u[:, t - j] for j in range(t + 1)), zero) for t in range(40)], 1)
    backward = torch.stack([sum((k_bwd[:, j] * u[:, t + j] for j in range(1, 40 - t)), zero) for t in range(40)], 1)
    assert torch.allclose(layer(u, causal=True), forward + layer.d * u, atol=1e-4)
    assert torch.allclose(layer(u), forward + backward + layer.d * u, atol=1e-4)
    later = u.clone()
    later[:, 25:] += 1.0
    assert torch.allclose(layer(u, causal=True)[:, :25], layer(later, causal=True)[:, :25], atol=1e-5)


@pytest.mark.parametrize("pooling", ["mean", "max", "cls"])
def test_ssm_family_classifier(pooling):
    spec = ModelSpec(family="ssm", d_model=32, n_layers=2, n_heads=4, d_ff=64, pooling=pooling, ssm_state=16)
    model = Classifier(classifier_config(spec, TOKENS))
    x = torch.randint(4, 30, (3, TOKENS.seq_len))
    x[:, -4:] = 0
    logits = model(obj.model_inputs(x, TOKENS), obj.padding_of(x, TOKENS))
    assert logits.shape == (3, TOKENS.num_classes) and torch.isfinite(logits).all()
    logits.sum().backward()
    assert model.encoder.blocks[0].ssm.ssm.log_dt.grad is not None


def test_a_causal_classifier_refuses_cls_pooling():
    """Causal, the CLS token at position 0 sees only itself: a constant to classify (the spec refuses it first)."""
    spec = ModelSpec(d_model=32, n_layers=1, n_heads=4, d_ff=64, pooling="cls")
    with pytest.raises(ValueError, match="cls pooling on a causal model"):
        Classifier(classifier_config(spec, PIXELS, causal=True))
    assert Classifier(classifier_config(spec, PIXELS)).cfg.pooling == "cls"  # bidirectional: it sees every position


def test_the_sinusoidal_table_is_fixed_shared_and_never_checkpointed():
    """The reference's table: sin in even, cos in odd features, base 10000, a buffer rebuilt from the config."""
    cfg = encoder_config(ModelSpec(d_model=8, n_layers=1, n_heads=2, d_ff=16, positions="sinusoidal"), PIXELS)
    a, b = Classifier(ModelConfig(cfg, num_classes=2)), Classifier(ModelConfig(cfg, num_classes=2))
    table = a.encoder.positions
    assert table.shape == (1, PIXELS.seq_len, 8) and not isinstance(table, torch.nn.Parameter)
    assert "encoder.positions" not in a.state_dict() and "encoder.positions" not in dict(a.named_parameters())
    assert torch.equal(table, b.encoder.positions)  # the same code in every model: qk_init's copied maps see it
    position, feature = 5, 2  # feature 2 = sin at rate 10000^(-2/8)
    assert table[0, position, feature] == pytest.approx(math.sin(position * 10000 ** (-2 / 8)))
    assert table[0, position, feature + 1] == pytest.approx(math.cos(position * 10000 ** (-2 / 8)))


def test_a_learned_table_starts_small_beside_the_input():
    torch.manual_seed(0)
    model = Classifier(classifier_config(ModelSpec(positions="learned"), PIXELS))
    assert isinstance(model.encoder.positions, torch.nn.Parameter)
    assert model.encoder.positions.std().item() == pytest.approx(0.02, rel=0.1)


def test_standardised_pixels_reach_the_model_and_a_masked_one_is_the_mean():
    info = TaskInfo(name="px", input_kind="continuous", seq_len=4, num_classes=2, levels=17, value_mean=0.5,
                    value_std=0.25)
    x = torch.tensor([[0, 8, 16, 12]])
    mask = torch.tensor([[False, False, True, False]])
    inputs = obj.model_inputs(x, info, mask)
    assert inputs[0, :, 0].tolist() == [-2.0, 0.0, 0.0, 1.0]  # (x/16 - 0.5) / 0.25; the masked one: 0
    assert inputs[0, :, 1].tolist() == [0.0, 0.0, 1.0, 0.0]
    assert obj.targets_for(x, info, "l1")[0, 2].item() == 1.0  # targets stay in the task's own units
