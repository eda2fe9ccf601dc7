"""The feature matrix's axes: the built-in model families, the variant kinds each supports, and a spec for one cell.

Which kinds a family supports is what the spec accepts (`sptune.spec.from_dict`): the matrix trains exactly those,
and tests/test_bad_inputs.py refuses the rest at --dry-run, one case each.
"""

from __future__ import annotations

from typing import Any

from sptune.errors import SpecError
from sptune.spec import KINDS, SweepSpec, from_dict
from sptune.spec.plugin_refs import BUILT_IN_FAMILIES

SEARCH = {"lr": {"type": "grid", "values": [1e-2]}, "batch_size": {"type": "choice", "values": [8]}}
# Only read by the spec's own checks (a language-model kind needs a path); cells that build one give a real one.
NO_LANGUAGE_MODEL = "no-language-model-here"


def model_families() -> tuple[str, ...]:
    """Every built-in model family (plug-ins are checked by their own contract, sptune.training.models.family_check)."""
    return tuple(BUILT_IN_FAMILIES)


def variant_entry(kind: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"kind": kind, "search": SEARCH}
    if KINDS[kind].cross_task:
        entry["source_task"] = {"name": "digits"}
    return entry


def cell_spec(
    family: str, kinds: list[str], objective: str = "masked", loss: str = "l2", lm_path: str = NO_LANGUAGE_MODEL
) -> dict[str, Any]:
    """A tiny study of these kinds (each a variant named after it) on one family, as a spec mapping."""
    spec: dict[str, Any] = {
        "name": "matrix",
        "task": {"name": "digits"},
        "model": {
            "family": family,
            "d_model": 16,
            "n_layers": 1,
            "n_heads": 2,
            "d_ff": 32,
            "ssm_state": 8,
            "dropout": 0.1,
            "pooling": "mean",
            "positions": "sinusoidal",
        },
        "pretrain": {"objective": objective, "loss": loss, "mask_ratio": 0.5, "search": SEARCH},
        "finetune": {"weight_decay": 0.1},
        "variants": {kind: variant_entry(kind) for kind in kinds},
        "training": {"device": "cpu", "warmup_fraction": 0.0},
        "scheduler": {"type": "fifo"},
    }
    if any(KINDS[kind].language_model for kind in kinds):
        spec["language_model"] = {"path": lm_path}
    return spec


def refusal(family: str, kind: str) -> SpecError | None:
    """Why the spec refuses this kind on this family (None: it is accepted)."""
    try:
        build_spec(family, [kind])
    except SpecError as err:
        return err
    return None


def supported_kinds(family: str) -> list[str]:
    return [kind for kind in KINDS if refusal(family, kind) is None]


def unsupported_pairs() -> list[tuple[str, str]]:
    return [(family, kind) for family in model_families() for kind in KINDS if refusal(family, kind) is not None]


def build_spec(
    family: str, kinds: list[str], objective: str = "masked", loss: str = "l2", lm_path: str = NO_LANGUAGE_MODEL
) -> SweepSpec:
    return from_dict(cell_spec(family, kinds, objective, loss, lm_path))
