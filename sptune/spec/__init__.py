"""YAML sweep spec -> validated, typed objects. Every error names the field path and a fix.

Each rule sits on the model it checks: ranges as Field constraints (`ranged`), rules within
one section as that section's validators, rules across sections on SweepSpec. Importable
without torch or ray, so a bad spec is refused before anything heavy starts.

The other section models live in sptune.spec.sections.

Modules: variant_kinds (the kinds table), fields (building blocks), search (search spaces),
sections (one model per section), sweep_spec (the whole spec), messages (error -> SpecError),
reading (YAML, --set overrides, load_spec).
"""

from sptune.spec.reading import RENAMED_KEYS, apply_override, from_dict, load_spec, read_yaml
from sptune.spec.search import BatchSizeSpace, LrSpace, ParamSpace, SearchSpec
from sptune.spec.sections import ModelSpec, PretrainSource, PretrainSpec, TaskSpec, VariantSpec
from sptune.spec.sweep_spec import SweepSpec
from sptune.spec.variant_kinds import KINDS, LANGUAGE_MODEL_KINDS, PRETRAINING_OF, VARIANT_KINDS, VariantKind

__all__ = [
    "KINDS",
    "LANGUAGE_MODEL_KINDS",
    "PRETRAINING_OF",
    "RENAMED_KEYS",
    "VARIANT_KINDS",
    "BatchSizeSpace",
    "LrSpace",
    "ModelSpec",
    "ParamSpace",
    "PretrainSource",
    "PretrainSpec",
    "SearchSpec",
    "SweepSpec",
    "TaskSpec",
    "VariantKind",
    "VariantSpec",
    "apply_override",
    "from_dict",
    "load_spec",
    "read_yaml",
]
