"""Each task's defaults: the settings of the reference implementation the papers ran (Amos et al.'s
not-from-scratch, on S4's codebase), filled in under whatever a spec leaves out.

docs/reference_settings.md is the table behind these values (parameter | Amos et al. config | Coser & Orvieto |
sptune default | why different), and tests/spec/test_task_defaults.py holds the two equal. A spec's own values
always win; a task without an entry keeps the sections' generic defaults.
"""

from __future__ import annotations

from typing import Any

# section -> field -> value. Only the model, training and pretrain sections take task defaults: searches (LR,
# batch size) are written by every spec, and the table gives the reference's values to write there.
TASK_DEFAULTS: dict[str, dict[str, dict[str, Any]]] = {
    "image": {
        "model": {"d_model": 64, "n_layers": 3, "n_heads": 4, "d_ff": 128, "dropout": 0.0,
                  "positions": "sinusoidal", "pooling": "max"},
        "training": {"grad_clip": 0.0, "schedule": "constant", "warmup_steps": 2000},
        "pretrain": {"mask_ratio": 0.5, "loss": "l1"},
    },
    # Not an LRA task: scikit-learn's 8x8 digits, CPU scale. Rotary, not the fixed table: at 64 pixels with
    # dark borders a sinusoidal table carries most of a token's variance (23 % data, below the 30 % check).
    "digits": {
        "model": {"positions": "rotary"},
    },
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
