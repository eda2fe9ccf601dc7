"""Model families: name -> how to build the encoder sptune puts its heads on.

The built-in `transformer` and `ssm` are registered here the same way a plug-in is found (by entry point in the
`sptune.models` group, or by a `module:attr` import path in `model.family`): each is a `ModelFamily` whose factory
returns an encoder, and which declares the variant kinds it supports. sptune keeps the rest: the classification
and SPT reconstruction heads, pooling, the variants' inits and freezing, checkpoints. The contract, for authors:
`sptune.plugins` and docs/guides/plugins.md.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from sptune.errors import SpecError
from sptune.spec import plugin_refs
from sptune.spec.variant_kinds import ATTENTION_ONLY_KINDS, KINDS, LANGUAGE_MODEL_KINDS
from sptune.tasks.base import TaskInfo
from sptune.training.models.encoder import Encoder, EncoderConfig


@dataclass(frozen=True)
class ModelSection:
    """What a model factory receives from the spec's ``model:`` section (with a trial's searched dropout).

    d_model: the width of the hidden states the encoder returns (the heads read it).
    n_layers: how many layers (blocks) to stack.
    dropout: the dropout rate (a trial may search it).
    options: the family's own options, ``model.options``, over the family's declared defaults.
    input_channels: continuous tasks feed (B, L, input_channels) floats: the standardised value and a mask flag
        (1 where SPT masked the position, its value then 0; all 0 when finetuning).
    config: the whole encoder config sptune derived (n_heads, d_ff, positions ... as the built-ins read them).
    """

    d_model: int
    n_layers: int
    dropout: float
    options: Mapping[str, Any]
    input_channels: int
    config: EncoderConfig


Factory = Callable[[ModelSection, TaskInfo], nn.Module]
# The kinds whose model is causal: a family declaring one of them honours `causal=True` in its forward.
CAUSAL_KINDS = frozenset(
    name for name, kind in KINDS.items() if kind.architecture == "causal" and not kind.language_model
)


@dataclass(frozen=True)
class ModelFamily:
    """A model family: an encoder factory and the variant kinds it supports.

    name: the family's name (its entry point's, or what `info` lists).
    factory: ``factory(model: ModelSection, info: TaskInfo) -> nn.Module``, an encoder whose
        ``forward(inputs, key_padding, causal)`` maps inputs (B, L) int64 token ids, or (B, L, C) floats for a
        continuous task, ``key_padding`` (B, L) bool (True at padding) or None, and ``causal`` (no position may
        see a later one) to per-position hidden states (B, L, d_model), floating point.
    kinds: the variant kinds (sptune.spec.variant_kinds) it supports. scratch and spt need only the per-position
        output; scratch_causal and spt_causal a forward that honours causal=True; qk_init needs parameters named
        ``blocks.<i>.attn.query.*`` and ``blocks.<i>.attn.key.*``; frozen_attn freezes ``blocks.<i>.attn.*``,
        frozen_attn_mlp also ``blocks.<i>.mlp.*``, spt_frozen ``blocks.<i>.{attn,ssm,mlp}.*``.
    description: one line for `python -m sptune.data info` and the dry run.
    options: the family's options with their defaults; a ``model.options`` key not here is refused.
    """

    name: str
    factory: Factory
    kinds: frozenset[str] = frozenset({"scratch", "spt"})
    description: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kinds", frozenset(self.kinds))

    @property
    def causal(self) -> bool:
        return bool(self.kinds & CAUSAL_KINDS)


_FAMILIES: dict[str, ModelFamily] = {}
_ORIGINS: dict[str, str] = {}
BUILT_IN = "built-in"


def register(family: ModelFamily, origin: str = BUILT_IN, name: str | None = None) -> ModelFamily:
    _FAMILIES[name or family.name] = family
    _ORIGINS[name or family.name] = origin
    return family


def _built_in(model: ModelSection, info: TaskInfo) -> nn.Module:
    return Encoder(model.config)


def _kinds(excluded: Iterable[str]) -> frozenset[str]:
    # The language-model kinds train a Hugging Face backbone whatever the family: no family declares them.
    return frozenset(KINDS) - set(LANGUAGE_MODEL_KINDS) - set(excluded)


register(ModelFamily("transformer", _built_in, _kinds(()), "pre-LN transformer encoder (attention)"))
register(ModelFamily("ssm", _built_in, _kinds(ATTENTION_ONLY_KINDS), "diagonal state-space layers (S4D-style)"))
BUILT_IN_FAMILIES = tuple(_FAMILIES)


def family_names() -> list[str]:
    """The built-in families and the installed plug-ins' (by entry point name; listing imports nothing)."""
    return sorted(set(_FAMILIES) | set(plugin_refs.installed(plugin_refs.MODEL_GROUP)))


def get_family(name: str) -> ModelFamily:
    """The family ``model.family`` names: built-in, an installed entry point, or an import path."""
    if name in _FAMILIES:
        return _FAMILIES[name]
    found = plugin_refs.find(name, plugin_refs.MODEL_GROUP, "model.family")
    if found is None:
        raise SpecError(
            "model.family",
            f"unknown model family '{name}'",
            f"use one of: {', '.join(family_names())}; or a plug-in's import path module:attribute "
            f"(see {plugin_refs.GUIDE})",
        )
    return register(plugin_refs.expect(found, ModelFamily, name, "model.family"), found.origin, name)


def family_origin(name: str) -> str:
    """Where family ``name`` comes from ('built-in', or its entry point / import path)."""
    return _ORIGINS.get(name) or plugin_refs.origin(name, plugin_refs.MODEL_GROUP)


def _task_of(cfg: EncoderConfig) -> TaskInfo:
    # Configs built outside a spec (tests, benchmarks) carry no task: the built-ins read only these fields.
    return cfg.task or TaskInfo("", cfg.input_kind, cfg.max_len, 0, vocab_size=cfg.vocab_size)


def section_of(cfg: EncoderConfig, family: ModelFamily) -> ModelSection:
    channels = cfg.input_channels if cfg.input_kind == "continuous" else 0
    return ModelSection(cfg.d_model, cfg.n_layers, cfg.dropout, {**family.options, **cfg.options}, channels, cfg)


def build_encoder(cfg: EncoderConfig) -> nn.Module:
    """The encoder of ``cfg.family``, built by its factory (the built-in `Encoder` for transformer and ssm)."""
    family = get_family(cfg.family)
    return family.factory(section_of(cfg, family), _task_of(cfg))
