"""How each variant initialises its classifier and which parameters it trains.

Every kind of the table in sptune.spec.variant_kinds has exactly one builder here: `@builds`
refuses a kind the table lacks or one already built, and the import fails if a kind has none.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch

from sptune.errors import DataError
from sptune.spec.variant_kinds import KINDS
from sptune.training.models import Classifier, ModelConfig, encoder_state
from sptune.training.models.lm import LMClassifier, freeze_backbone, load_backbone

# A variant builder takes the classifier config and (optionally) an SPT checkpoint's
# model state, and returns a ready-to-train model with requires_grad set.
Builder = Callable[..., torch.nn.Module]
BUILDERS: dict[str, Builder] = {}


def builds(*kinds: str) -> Callable[[Builder], Builder]:
    """Register the decorated function as the builder of these variant kinds."""

    def register(builder: Builder) -> Builder:
        for kind in kinds:
            if kind not in KINDS:
                raise ValueError(f"builder for unknown variant kind '{kind}': add it to sptune/spec/variant_kinds.py")
            if kind in BUILDERS:
                raise ValueError(f"variant kind '{kind}' already has a builder ({BUILDERS[kind].__name__})")
            BUILDERS[kind] = builder
        return builder

    return register


def check_every_kind_built(builders: Mapping[str, Builder]) -> None:
    missing = [kind for kind in KINDS if kind not in builders]
    if missing:
        raise ValueError(f"variant kinds without a builder: {', '.join(missing)} "
                         "(add @builds in sptune/training/variants.py)")


@builds("scratch", "scratch_causal")
def _scratch(cfg: ModelConfig, spt_state: dict | None) -> Classifier:
    # scratch_causal is spt_causal's model from a random init: cfg.causal says which (checked in build_model).
    return Classifier(cfg)


def _require(spt_state: dict | None, kind: str) -> dict:
    if spt_state is None:
        raise ValueError(f"variant '{kind}' needs the selected pretraining checkpoint")
    return spt_state


def _from_spt(cfg: ModelConfig, spt_state: dict | None, kind: str) -> Classifier:
    model = Classifier(cfg)
    # strict: every encoder weight must come from SPT; the reconstruction head is dropped.
    model.encoder.load_state_dict(encoder_state(_require(spt_state, kind)), strict=True)
    return model


@builds("spt", "spt_causal")
def _spt(cfg: ModelConfig, spt_state: dict | None) -> Classifier:
    return _from_spt(cfg, spt_state, "spt")


def load_matching(model: Classifier, spt_state: dict) -> dict[str, list[str]]:
    """Copy every encoder weight whose name and shape match; the rest keep their random init.

    Used when pretraining ran on another task (spt_cross): input layers and positions
    differ in shape between tasks, the transformer blocks do not. Returns the mapping."""
    pretrained = encoder_state(spt_state)
    own = model.encoder.state_dict()
    copied = {k: v for k, v in pretrained.items() if k in own and own[k].shape == v.shape}
    model.encoder.load_state_dict(copied, strict=False)
    return {"copied": sorted(copied), "reinitialised": sorted(set(own) - set(copied))}


@builds("spt_cross")
def _spt_cross(cfg: ModelConfig, spt_state: dict | None) -> Classifier:
    model = Classifier(cfg)
    model.init_mapping = load_matching(model, _require(spt_state, "spt_cross"))
    return model


def _query_key(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v for k, v in state.items() if ".attn.query." in k or ".attn.key." in k}


def copy_query_key(model: Classifier, spt_state: dict) -> None:
    """Copy every attention query/key map of the SPT encoder into ``model``; refuse a partial copy.

    qk_init's claim is "the pretrained query/key maps, nothing else": a checkpoint from a model with
    other layers or sizes would copy some maps or none, so it is refused with what did not match."""
    pretrained, own = _query_key(encoder_state(spt_state)), _query_key(model.encoder.state_dict())
    missing, extra = sorted(set(own) - set(pretrained)), sorted(set(pretrained) - set(own))
    wrong = sorted(k for k in set(own) & set(pretrained) if own[k].shape != pretrained[k].shape)
    if missing or extra or wrong:
        detail = (f"missing {missing[:3]}" if missing else f"extra {extra[:3]}" if extra
                  else f"{wrong[0]} has shape {tuple(pretrained[wrong[0]].shape)}, the model needs "
                       f"{tuple(own[wrong[0]].shape)}")
        raise DataError("qk_init: the SPT checkpoint", f"its query/key weights do not match this model ({detail})",
                        "pretrain with this spec's model sizes (n_layers, d_model, n_heads), or give a "
                        "pretrain.checkpoint from such a model")
    model.encoder.load_state_dict(pretrained, strict=False)


@builds("qk_init")
def _qk_init(cfg: ModelConfig, spt_state: dict | None) -> Classifier:
    """Random init, then only the attention query/key maps copied from SPT."""
    model = Classifier(cfg)
    copy_query_key(model, _require(spt_state, "qk_init"))
    return model


def _freeze(model: Classifier, parts: tuple[str, ...]) -> Classifier:
    for name, param in model.named_parameters():
        # Only inside transformer blocks: the classification head also has an "mlp".
        if name.startswith("encoder.blocks.") and any(f".{part}." in name for part in parts):
            param.requires_grad_(False)
    return model


@builds("frozen_attn")
def _frozen_attn(cfg: ModelConfig, spt_state: dict | None) -> Classifier:
    """Attention frozen at random init; embeddings, norms, MLPs and head train."""
    return _freeze(Classifier(cfg), ("attn",))


@builds("frozen_attn_mlp")
def _frozen_attn_mlp(cfg: ModelConfig, spt_state: dict | None) -> Classifier:
    """Attention and MLP frozen at random init; embeddings, norms and head train."""
    return _freeze(Classifier(cfg), ("attn", "mlp"))


# What a frozen pretrained encoder keeps fixed, as FPT does (Lu et al.): each block's token mixer (attention or
# SSM) and MLP. Its input embedding, positions, CLS vector and layer norms train, as does the new head.
FROZEN_IN_PRETRAINED = ("attn", "ssm", "mlp")


@builds("spt_frozen")
def _spt_frozen(cfg: ModelConfig, spt_state: dict | None) -> Classifier:
    """The selected SPT encoder, as `spt` loads it, with every block's mixer and MLP frozen."""
    return _freeze(_from_spt(cfg, spt_state, "spt_frozen"), FROZEN_IN_PRETRAINED)


def _language_model(pretrained: bool, frozen: bool):
    def build(cfg: ModelConfig, spt_state: dict | None, lm_path: str | None = None) -> torch.nn.Module:
        if lm_path is None:
            raise ValueError("language-model variants need language_model.path in the spec")
        model = LMClassifier(cfg, load_backbone(lm_path, pretrained))
        return freeze_backbone(model) if frozen else model

    return build


# Frozen pretrained transformers (Lu et al.) and their controls.
builds("fpt_frozen")(_language_model(pretrained=True, frozen=True))
builds("fpt_unfrozen")(_language_model(pretrained=True, frozen=False))
builds("frozen_random")(_language_model(pretrained=False, frozen=True))
builds("unfrozen_random")(_language_model(pretrained=False, frozen=False))
check_every_kind_built(BUILDERS)  # a kind added to the table without a builder fails here, at import


def build_model(
    kind: str, cfg: ModelConfig, spt_state: dict | None = None, lm_path: str | None = None
) -> torch.nn.Module:
    facts = KINDS[kind]
    # A causal kind built on a bidirectional config would silently train the wrong model (the language
    # models are causal by their own backbone and ignore cfg.causal).
    if facts.architecture == "causal" and not facts.language_model and not cfg.causal:
        raise ValueError(f"variant kind '{kind}' trains a causal model: build its config with causal=True "
                         "(sptune.training.model_configs.variant_classifier_config)")
    if facts.language_model:
        return BUILDERS[kind](cfg, spt_state, lm_path)
    return BUILDERS[kind](cfg, spt_state)


def build_for_evaluation(kind: str, cfg: ModelConfig, lm_path: str | None = None) -> torch.nn.Module:
    """The variant's architecture with any init: its weights come from a checkpoint next."""
    if KINDS[kind].language_model:
        return LMClassifier(cfg, load_backbone(lm_path, pretrained=False))
    return Classifier(cfg)


def trainable_summary(model: torch.nn.Module) -> dict[str, object]:
    """Counts and names of trained parameters (logged per run)."""
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    return {
        "trainable_params": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "total_params": sum(p.numel() for p in model.parameters()),
        "trainable_names": names,
    }
