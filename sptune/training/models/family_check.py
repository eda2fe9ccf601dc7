"""A plug-in model family checked at the dry run, before anything trains: the variant kinds the spec asks of it,
its options, and one forward of its factory's encoder on a tiny batch shaped as the study's task feeds it.

Each failure is a `SpecError` naming the field (model.family, model.options.KEY, variants.NAME) and the fix.
"""

from __future__ import annotations

import torch
from torch import nn

from sptune.errors import SpecError, SptuneError
from sptune.spec import SweepSpec
from sptune.tasks.base import TaskInfo
from sptune.training.model_configs import encoder_config
from sptune.training.models.families import CAUSAL_KINDS, ModelFamily, build_encoder, family_origin, get_family

GUIDE = "docs/guides/plugins.md"
# Per kind, the parameter names (under the encoder) its builder copies or freezes (sptune.training.variants).
NAMED_PARTS = {
    "qk_init": ((".attn.query.", ".attn.key."), "blocks.<i>.attn.query.* and blocks.<i>.attn.key.*"),
    "frozen_attn": ((".attn.",), "blocks.<i>.attn.*"),
    "frozen_attn_mlp": ((".attn.", ".mlp."), "blocks.<i>.attn.* and blocks.<i>.mlp.*"),
}
SPT_FROZEN_PARTS = (".attn.", ".ssm.", ".mlp.")
BATCH = 2


def check_plugin_family(spec: SweepSpec, info: TaskInfo) -> ModelFamily:
    """Refuse a plug-in family that cannot train this spec's variants on this task; return it."""
    name = spec.model.family
    family = get_family(name)
    label = f"'{name}' ({family_origin(name)})"
    if spec.resources.pack != 1:  # auto never packs a plug-in (sptune.spec.pack_rules.packable)
        raise SpecError(
            "resources.pack",
            f"model family {label} is a plug-in: a pack fuses the built-in families' "
            "own modules (their dropout draws from each member's stream)",
            "set resources.pack: 1",
        )
    _check_options(spec, family, label)
    _check_kinds(spec, family, label)
    encoder = _built(spec, info, label)
    _check_forward(encoder, spec.model.d_model, info, label, causal=False)
    if any(spec.variant_is_causal(v) for v in spec.variants):
        _check_forward(encoder, spec.model.d_model, info, label, causal=True)
        _check_causal(encoder, info, label)
    _check_named_parts(spec, encoder, label)
    return family


def _check_options(spec: SweepSpec, family: ModelFamily, label: str) -> None:
    unknown = sorted(set(spec.model.options) - set(family.options))
    if unknown:
        allowed = ", ".join(f"{k} (default {v!r})" for k, v in family.options.items()) or "none"
        raise SpecError(
            f"model.options.{unknown[0]}",
            f"model family {label} has no option '{unknown[0]}'",
            f"use its options: {allowed}",
        )


def _check_kinds(spec: SweepSpec, family: ModelFamily, label: str) -> None:
    supported = ", ".join(sorted(family.kinds))
    for variant in spec.variants:
        kind, facts = spec.variant_kind(variant), spec.variant_facts(variant)
        if facts.language_model:
            continue  # trains the language model's backbone, whatever model.family is
        if kind not in family.kinds:
            raise SpecError(
                f"variants.{variant}",
                f"variant kind '{kind}' is not supported by model family {label} (it supports {supported})",
                f"drop the variant, or use a family that supports it (e.g. model.family: transformer); a "
                f"family declares its kinds in ModelFamily.kinds ({GUIDE})",
            )
        if facts.architecture == "causal" and not family.causal:
            raise SpecError(
                f"variants.{variant}",
                f"variant '{variant}' (kind '{kind}', pretrain.objective: causal) "
                f"trains a causal model, and model family {label} declares no causal kind "
                f"({', '.join(sorted(CAUSAL_KINDS))})",
                "use pretrain.objective: masked, or a family whose encoder honours causal=True",
            )


def _built(spec: SweepSpec, info: TaskInfo, label: str) -> nn.Module:
    try:
        encoder = build_encoder(encoder_config(spec.model, info))
    except SptuneError:
        raise  # the factory's own refusal, naming its field
    except Exception as err:  # noqa: BLE001 - the plug-in's own code: name what it raised
        raise SpecError(
            "model.family",
            f"the factory of model family {label} raised {type(err).__name__}: {err}",
            f"fix the factory (it receives sptune.plugins.ModelSection and TaskInfo; {GUIDE})",
        ) from None
    if not isinstance(encoder, nn.Module):
        raise SpecError(
            "model.family",
            f"the factory of model family {label} returned a {type(encoder).__name__}, not a torch.nn.Module",
            f"return the encoder module ({GUIDE})",
        )
    return encoder


def tiny_batch(info: TaskInfo, channels: int = 2) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Inputs as the loops feed them: token ids (B, L) int64 with the last position of one row padded, or
    continuous (B, L, channels) float32 (value, mask flag) with no padding."""
    generator = torch.Generator().manual_seed(0)
    if info.input_kind == "tokens":
        inputs = torch.randint(0, max(1, info.vocab_size), (BATCH, info.seq_len), generator=generator)
        padding = torch.zeros(BATCH, info.seq_len, dtype=torch.bool)
        padding[-1, -1] = True
        inputs[-1, -1] = info.pad_id
        return inputs, padding
    return torch.randn(BATCH, info.seq_len, channels, generator=generator), None


def _check_forward(encoder: nn.Module, d_model: int, info: TaskInfo, label: str, causal: bool) -> None:
    inputs, padding = tiny_batch(info)
    expected = (BATCH, info.seq_len, d_model)
    given = (
        f"inputs {tuple(inputs.shape)} {inputs.dtype}, key_padding {'None' if padding is None else 'bool'}, "
        f"causal={causal}"
    )
    encoder.eval()
    try:
        with torch.no_grad():
            out = encoder(inputs, padding, causal)
    except Exception as err:  # noqa: BLE001 - the plug-in's own forward
        raise SpecError(
            "model.family",
            f"the encoder of model family {label} raised {type(err).__name__}: {err} on {given}",
            f"make forward(inputs, key_padding, causal) accept what sptune feeds ({GUIDE})",
        ) from None
    if not isinstance(out, torch.Tensor):
        raise SpecError(
            "model.family",
            f"the encoder of model family {label} returned a {type(out).__name__} on {given}",
            f"return one tensor of hidden states {expected}",
        )
    if tuple(out.shape) != expected:
        raise SpecError(
            "model.family",
            f"the encoder of model family {label} returned shape {tuple(out.shape)} on "
            f"{given}; sptune's classification and SPT reconstruction heads need one hidden state per "
            f"position, (batch, length, d_model) = {expected}",
            "return every position's hidden state of width model.d_model (no pooling: sptune pools)",
        )
    if not out.is_floating_point():
        raise SpecError(
            "model.family",
            f"the encoder of model family {label} returned dtype {out.dtype} on {given}",
            "return floating-point hidden states (e.g. float32)",
        )


def _check_causal(encoder: nn.Module, info: TaskInfo, label: str) -> None:
    """A changed last input must leave every earlier position's output as it was."""
    inputs, padding = tiny_batch(info)
    changed = inputs.clone()
    changed[:, -1] = (changed[:, -1] + 1) % max(2, info.vocab_size) if info.input_kind == "tokens" else 5.0
    with torch.no_grad():
        before, after = encoder(inputs, padding, True), encoder(changed, padding, True)
    if info.seq_len > 1 and not torch.allclose(before[:, :-1], after[:, :-1], atol=1e-5):
        raise SpecError(
            "model.family",
            f"model family {label} declares causal kinds, but with causal=True its "
            "outputs at earlier positions change when only the last input does",
            "make causal=True look only at earlier positions, or drop the causal kinds it declares",
        )


def _check_named_parts(spec: SweepSpec, encoder: nn.Module, label: str) -> None:
    names = [name for name, _ in encoder.named_parameters() if name.startswith("blocks.")]
    for variant in spec.variants:
        kind = spec.variant_kind(variant)
        if kind in NAMED_PARTS:
            parts, described = NAMED_PARTS[kind]
            if not all(any(part in name for name in names) for part in parts):
                raise SpecError(
                    f"variants.{variant}",
                    f"model family {label} declares kind '{kind}', which copies "
                    f"or freezes parameters named {described}, and its encoder has none",
                    f"name them so, or drop '{kind}' from its kinds ({GUIDE})",
                )
        if kind == "spt_frozen" and not any(part in name for part in SPT_FROZEN_PARTS for name in names):
            raise SpecError(
                f"variants.{variant}",
                f"model family {label} declares kind 'spt_frozen', which freezes "
                "parameters named blocks.<i>.attn.*, .ssm.* or .mlp.*, and its encoder has none",
                f"name its blocks so, or drop 'spt_frozen' from its kinds ({GUIDE})",
            )
