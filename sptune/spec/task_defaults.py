"""Each task's defaults: the settings of the reference implementation the papers ran (Amos et al.'s
not-from-scratch, on S4's codebase), filled in under whatever a spec leaves out.

docs/reference_settings.md is the table behind these values (parameter | Amos et al. config | Coser & Orvieto |
sptune default | why different), and tests/spec/test_task_defaults.py holds the two equal. A spec's own values
always win; a task without an entry keeps the sections' generic defaults.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


# section -> field -> value. Only the model, training and pretrain sections take task defaults: searches (LR,
# batch size) are written by every spec, and the table gives the reference's values to write there.
def _reference(model: dict[str, Any], warmup: tuple[int, int], pretrain: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """One LRA task's reference settings. Common to every transformer LRA config of the reference: dropout 0
    everywhere, a fixed sinusoidal table, no gradient clipping, constant_warmup stepped per step; ``warmup`` is
    (finetune, pretrain) warm-up steps."""
    return {
        "model": {**model, "dropout": 0.0, "positions": "sinusoidal"},
        "training": {"grad_clip": 0.0, "schedule": "constant", "warmup_steps": warmup[0]},
        "pretrain": {**pretrain, "warmup_steps": warmup[1]},
    }


def _sizes(d_model: int, n_layers: int, n_heads: int, d_ff: int, pooling: str) -> dict[str, Any]:
    return {"d_model": d_model, "n_layers": n_layers, "n_heads": n_heads, "d_ff": d_ff, "pooling": pooling}


# section -> field -> value. Only the model, training and pretrain sections take task defaults: searches (LR,
# batch size) are written by every spec, and the table gives the reference's values to write there.
TASK_DEFAULTS: dict[str, dict[str, dict[str, Any]]] = {
    "listops": _reference(_sizes(512, 6, 8, 2048, "mean"), (2000, 2000), {"mask_ratio": 0.1, "loss": "ce"}),
    "text": _reference(_sizes(512, 6, 8, 2048, "mean"), (2000, 5000), {"mask_ratio": 0.15, "loss": "ce"}),
    "retrieval": _reference(_sizes(128, 4, 4, 512, "mean"), (5000, 2000), {"mask_ratio": 0.15, "loss": "ce"}),
    # Pooling max, as the papers' table has it (the reference's config: mean pooling and a 2-layer MLP head).
    "image": _reference(_sizes(64, 3, 4, 128, "max"), (2000, 2500), {"mask_ratio": 0.5, "loss": "l1"}),
    "pathfinder": _reference(_sizes(128, 4, 8, 128, "mean"), (5000, 2500), {"mask_ratio": 0.5, "loss": "ce"}),
    "pathx": _reference(_sizes(128, 4, 4, 128, "max"), (5000, 5000), {"mask_ratio": 0.5, "loss": "ce"}),
    # Not an LRA task: scikit-learn's 8x8 digits, CPU scale. The Image task's fixed table: with rotary codes alone
    # (relative positions only) scratch must learn the image's layout from labels and did not fit its training
    # rows in the main job's 20 epochs (docs/reference_settings.md). The table leaves 31 % of a token's variance to
    # the image (dark borders), above the 30 % bar of tests/training/models/test_input_share.py.
    "digits": {"model": {"positions": "sinusoidal"}},
}

# Only the fields a spec may leave to its task: a key in TASK_DEFAULTS outside these is a bug in the table.
SECTIONS = ("model", "training", "pretrain")


def task_defaults(task: str) -> dict[str, dict[str, Any]]:
    """The task's default values per section (empty for a task without an entry)."""
    return TASK_DEFAULTS.get(task, {})


def under_task_defaults(data: Any) -> Any:
    """The spec's raw mapping with its task's defaults filled in beneath what it writes itself.

    The pretrain section takes defaults only where the spec has one (a spec without pretraining stays so), and a
    written ``training.warmup_fraction`` keeps the task's warm-up in steps out (the spec chose a fraction)."""
    if not isinstance(data, dict) or not isinstance(data.get("task"), dict):
        return data
    defaults = task_defaults(str(data["task"].get("name")))
    merged = dict(data)
    for section, values in defaults.items():
        written = data.get(section)
        if section == "pretrain" and not isinstance(written, dict):
            continue
        if written is not None and not isinstance(written, dict):
            continue  # not a mapping: the section's own validation says so
        written = written or {}
        if "warmup_fraction" in (data.get("training") or {}):
            values = {k: v for k, v in values.items() if k != "warmup_steps"}
        merged[section] = {**values, **written}
    return merged


def inherited_fields(data: Any) -> frozenset[str]:
    """The fields (``section.field``) `under_task_defaults` fills in from the task for this raw mapping: the ones
    the spec did not write itself."""
    merged = under_task_defaults(data)
    if merged is data:
        return frozenset()
    return frozenset(f"{section}.{key}" for section in SECTIONS if isinstance(merged.get(section), dict)
                     for key in merged[section] if key not in (data.get(section) or {}))


def validated_under_task_defaults(cls: type, data: Any, handler: Callable[[Any], Any]) -> Any:
    """A pydantic wrap validator: the spec validated with its task's defaults filled in, remembering which fields
    came from them (`SweepSpec.inherited_defaults`)."""
    spec = handler(under_task_defaults(data))
    if isinstance(data, dict):
        spec._inherited = inherited_fields(data)
    return spec
