"""The model-family registry: built-ins registered as plug-ins are, a plug-in's encoder under sptune's own heads,
variants and SPT handoff, and what its factory receives."""

from __future__ import annotations

import torch

from sptune.spec import ModelSpec
from sptune.spec.variant_kinds import ATTENTION_ONLY_KINDS, LANGUAGE_MODEL_KINDS
from sptune.tasks.base import TaskInfo
from sptune.training import objectives as obj
from sptune.training.model_configs import classifier_config, encoder_config
from sptune.training.models import Classifier, Encoder, Pretrainer
from sptune.training.models.families import (
    BUILT_IN_FAMILIES,
    ModelFamily,
    build_encoder,
    family_names,
    family_origin,
    get_family,
)
from sptune.training.variants import build_model
from tests import helpers_plugins

PIXELS = TaskInfo(name="px", input_kind="continuous", seq_len=16, num_classes=3)
TOKENS = TaskInfo(name="tok", input_kind="tokens", seq_len=12, num_classes=2, vocab_size=9)
PER_POSITION = "tests.helpers_plugins:PER_POSITION"


def test_the_built_in_families_are_registered_as_plugins_are():
    assert BUILT_IN_FAMILIES == ("transformer", "ssm")
    for name in BUILT_IN_FAMILIES:
        assert isinstance(get_family(name), ModelFamily) and family_origin(name) == "built-in"
        assert name in family_names()
    transformer, ssm = get_family("transformer"), get_family("ssm")
    assert set(ATTENTION_ONLY_KINDS) <= transformer.kinds and not set(ATTENTION_ONLY_KINDS) & ssm.kinds
    assert not set(LANGUAGE_MODEL_KINDS) & (transformer.kinds | ssm.kinds)
    assert transformer.causal and ssm.causal


def test_a_built_in_family_builds_the_encoder_it_always_built():
    cfg = encoder_config(ModelSpec(family="ssm", d_model=16, n_layers=2, n_heads=2, d_ff=32), PIXELS)
    built = build_encoder(cfg)
    assert type(built) is Encoder and built.state_dict().keys() == Encoder(cfg).state_dict().keys()


def test_a_plugin_family_trains_under_sptunes_heads_and_hands_its_spt_weights_over():
    spec = ModelSpec(family=PER_POSITION, d_model=8, n_layers=1, pooling="mean")
    assert family_origin(PER_POSITION) == f"import path {PER_POSITION}"
    pretrainer = Pretrainer(encoder_config(spec, TOKENS), TOKENS.vocab_size)
    x = torch.randint(2, 9, (3, TOKENS.seq_len))
    assert pretrainer(obj.model_inputs(x, TOKENS)).shape == (3, TOKENS.seq_len, TOKENS.vocab_size)
    model = build_model("spt", classifier_config(spec, TOKENS), pretrainer.state_dict())
    assert type(model.encoder).__name__ == "_PerPosition"
    assert torch.equal(model.encoder.embed.weight, pretrainer.encoder.embed.weight)  # the SPT handoff
    logits = model(obj.model_inputs(x, TOKENS), obj.padding_of(x, TOKENS))
    assert logits.shape == (3, TOKENS.num_classes)
    logits.sum().backward()
    assert model.encoder.embed.weight.grad is not None


def test_the_factory_receives_the_model_section_with_its_options_and_the_task():
    helpers_plugins.RECEIVED.clear()
    spec = ModelSpec(
        family="tests.helpers_plugins:RECORDING",
        d_model=8,
        n_layers=3,
        dropout=0.25,
        options={"cell": "lstm"},
        pooling="max",
    )
    Classifier(classifier_config(spec, PIXELS))
    ((section, info),) = helpers_plugins.RECEIVED
    assert (section.d_model, section.n_layers, section.dropout) == (8, 3, 0.25)
    assert dict(section.options) == {"width_scale": 1, "cell": "lstm"}  # the spec's over the family's defaults
    assert section.input_channels == 2 and info == PIXELS


def test_an_encoder_config_without_a_task_still_builds_the_built_ins():
    from sptune.training.models import EncoderConfig

    assert type(build_encoder(EncoderConfig(d_model=8, n_layers=1, n_heads=2, d_ff=16, max_len=4))) is Encoder
