"""The plug-in contract: tasks and model families from outside the package (guide: docs/guides/plugins.md).

Everything a plug-in imports from sptune is here; nothing else is promised to stay.

**Finding plug-ins.** An installed package declares entry points (``pyproject.toml``)::

    [project.entry-points."sptune.tasks"]
    majority = "my_pkg.tasks:MAJORITY"        # a TaskDef
    [project.entry-points."sptune.models"]
    gru = "my_pkg.models:GRU"                 # a ModelFamily

and a spec names them ``task: {name: majority}``, ``model: {family: gru}``. Without installing, a spec may give the
object's import path instead (the entry points' ``module:attr``): ``task: {name: "my_pkg.tasks:MAJORITY"}``,
``model: {family: "my_pkg.models:GRU", options: {...}}``; the module must import on the Python path (PYTHONPATH
reaches Ray's trials too). ``python -m sptune.data info`` lists both kinds beside the built-ins.

**A task** is a `TaskDef`: its options' defaults (a spec's unknown option is refused), ``check_available(request)``
(cheap: raise `DataError` naming what is missing and the fix) and ``load(request) -> TaskSplits``. The
`TaskRequest` carries the options (defaults filled in), the spec's seed and ``--data-dir``. `TaskSplits` holds a
`TaskInfo` (input kind, sequence length, classes, vocabulary or levels), ``train`` and ``val`` as `ArraySplit`
(x: (N, seq_len) whole numbers, token ids or continuous levels 0..levels-1; y: (N,) int labels 0..num_classes-1)
and a zero-argument function that loads the test split, which sptune seals until the final evaluation.
`carve_validation` takes a seeded validation split from the training rows. The dry run refuses a load that breaks
this (wrong type, shape, dtype or range) naming the split and the fix.

**A model family** is a `ModelFamily`: ``factory(model: ModelSection, info: TaskInfo) -> nn.Module`` builds an
encoder; sptune adds its own classification and SPT reconstruction heads, pooling (model.pooling: mean, max or
last), the variants' inits and freezing, and checkpoints. The encoder's ``forward(inputs, key_padding, causal)``
takes (B, L) int64 token ids, or (B, L, C) float32 for a continuous task (C = ``ModelSection.input_channels``:
the value and SPT's mask flag), ``key_padding`` (B, L) bool or None, and returns (B, L, d_model) floating-point
hidden states, one per position. ``ModelFamily.kinds`` declares the variant kinds it supports; the dry run runs
the factory once on a tiny batch and refuses a wrong shape or dtype, a kind the family does not declare, a causal
kind whose outputs look ahead, or an attention kind without the parameter names it copies or freezes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sptune.errors import DataError, SpecError
from sptune.tasks.base import ArraySplit, TaskInfo, TaskSplits, carve_validation
from sptune.tasks.option_rules import Option
from sptune.tasks.registry import TaskDef, TaskRequest

if TYPE_CHECKING:
    from sptune.training.models.families import ModelFamily, ModelSection

# The model half imports torch: loaded on first use, so a task plug-in (and `sptune.data`) stays torch-free.
_FROM_FAMILIES = ("ModelFamily", "ModelSection")


def __getattr__(name: str) -> object:
    if name in _FROM_FAMILIES:
        from sptune.training.models import families

        return getattr(families, name)
    raise AttributeError(f"module 'sptune.plugins' has no attribute '{name}'")


__all__ = [
    "ArraySplit",
    "DataError",
    "ModelFamily",
    "ModelSection",
    "Option",
    "SpecError",
    "TaskDef",
    "TaskInfo",
    "TaskRequest",
    "TaskSplits",
    "carve_validation",
]
