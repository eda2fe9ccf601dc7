"""YAML sweep spec -> validated, typed objects. Every error names the field path and a fix.

Two passes: pydantic checks structure and types (unknown keys, wrong types); then
`check_semantics` checks meaning (ranges, names, cross-field rules) with explicit paths.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sptune.errors import SpecError

# Keep in sync with sptune.variants.BUILDERS (spec stays importable without torch).
VARIANT_KINDS = (
    "scratch",
    "spt",
    "spt_causal",
    "qk_init",
    "frozen_attn",
    "frozen_attn_mlp",
    "fpt_frozen",
    "fpt_unfrozen",
    "frozen_random",
    "unfrozen_random",
    "spt_cross",
)
LANGUAGE_MODEL_KINDS = ("fpt_frozen", "fpt_unfrozen", "frozen_random", "unfrozen_random")
PRETRAINING_OF = {
    "scratch": None,
    "spt": "masked",
    "spt_causal": "causal",
    "qk_init": "masked",
    "frozen_attn": None,
    "frozen_attn_mlp": None,
    "fpt_frozen": None,
    "fpt_unfrozen": None,
    "frozen_random": None,
    "unfrozen_random": None,
    "spt_cross": "masked",
}


class PretrainSource:
    """One pretraining run: an objective on the study's task, or on another task (spt_cross)."""

    def __init__(self, objective: str, task: TaskSpec | None = None) -> None:
        self.objective, self.task = objective, task

    @property
    def stage_name(self) -> str:
        # The masked objective on the study's own task keeps the plain name: the common case.
        name = "pretrain" if self.objective == "masked" else f"pretrain-{self.objective}"
        if self.task is not None:
            options = "-".join(f"{k}{v}" for k, v in sorted(self.task.options.items()))
            name += f"-on-{self.task.name}" + (f"-{options}" if options else "")
        return name


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=False, validate_default=True)


class ParamSpace(Strict):
    """One hyperparameter's search: a range (Optuna/random) or a list (grid/choice)."""

    type: Literal["loguniform", "uniform", "grid", "choice"]
    low: float | None = None
    high: float | None = None
    values: list[float] | None = None

    @property
    def is_grid(self) -> bool:
        return self.type == "grid"

    def size(self) -> int | None:
        return len(self.values) if self.values is not None else None

    def candidates(self) -> list[float]:
        return list(self.values) if self.values else [self.low, self.high]


class SearchSpec(Strict):
    lr: ParamSpace
    batch_size: ParamSpace

    def items(self) -> list[tuple[str, ParamSpace]]:
        return [("lr", self.lr), ("batch_size", self.batch_size)]

    def has_grid(self) -> bool:
        return any(p.is_grid for _, p in self.items())

    def grid_size(self) -> int:
        return math.prod(p.size() or 1 for _, p in self.items() if p.is_grid)


class TaskSpec(BaseModel):
    # Task-specific options (e.g. resolution) are checked against the task registry.
    model_config = ConfigDict(extra="allow")
    name: str

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class ModelSpec(Strict):
    family: Literal["transformer", "ssm"] = "transformer"
    ssm_state: int = 64  # state size of the diagonal SSM layers (family: ssm)
    d_model: int = 64
    n_layers: int = 3
    n_heads: int = 4
    d_ff: int = 128
    dropout: float = 0.1
    attention_dropout: float = 0.0  # > 0 disables the fast fused attention kernels
    positions: Literal["rotary", "learned", "none"] = "learned"
    pooling: Literal["mean", "max", "last", "cls"] = "max"


class PretrainSpec(Strict):
    enabled: bool = True
    objective: Literal["masked", "causal"] = "masked"
    mask_ratio: float = 0.5
    loss: Literal["ce", "l1", "l2"] = "l2"
    epochs: int = 10
    num_samples: int = 4
    weight_decay: float = 0.0
    search: SearchSpec
    # Reuse an existing SPT checkpoint (an sptune state.pt, or the folder holding it) for
    # the `objective` stage instead of pretraining again.
    checkpoint: str | None = None


class FinetuneSpec(Strict):
    epochs: int = 10
    num_samples: int = 4
    weight_decay: float = 0.0


class VariantSpec(Strict):
    kind: str | None = None
    search: SearchSpec
    # spt_cross: pretrain on this task instead of the study's own (A -> B transfer).
    source_task: TaskSpec | None = None
    num_samples: int | None = None
    epochs: int | None = None


class SchedulerSpec(Strict):
    type: Literal["asha", "fifo"] = "asha"
    grace_period: int = 2
    reduction_factor: float = 2.0


class SearcherSpec(Strict):
    # Used for range searches; grids always run through Ray's grid (BasicVariantGenerator).
    type: Literal["optuna", "random"] = "optuna"


class ResourcesSpec(Strict):
    cpu: float = 1.0
    gpu: float = 0.0
    max_concurrent: int | None = None


class TrainingSpec(Strict):
    device: Literal["auto", "cpu", "cuda"] = "auto"
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    warmup_fraction: float = 0.1
    grad_clip: float = 1.0
    compile: bool = False


class LanguageModelSpec(Strict):
    # A Hugging Face checkpoint directory on local disk (e.g. GPT-2 saved with save_pretrained).
    path: str


class TrackingSpec(Strict):
    experiment: str | None = None
    uri: str | None = None


class SweepSpec(Strict):
    name: str
    seed: int = 0
    max_failures: int = 0  # retries per trial that raises (Ray Tune FailureConfig)
    rerun_seeds: int = 1  # >1: each variant's selected config is re-trained with this many seeds
    task: TaskSpec
    model: ModelSpec = Field(default_factory=ModelSpec)
    pretrain: PretrainSpec | None = None
    finetune: FinetuneSpec = Field(default_factory=FinetuneSpec)
    variants: dict[str, VariantSpec]
    scheduler: SchedulerSpec = Field(default_factory=SchedulerSpec)
    searcher: SearcherSpec = Field(default_factory=SearcherSpec)
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    training: TrainingSpec = Field(default_factory=TrainingSpec)
    tracking: TrackingSpec = Field(default_factory=TrackingSpec)
    language_model: LanguageModelSpec | None = None

    def variant_kind(self, name: str) -> str:
        return self.variants[name].kind or name

    def variant_epochs(self, name: str) -> int:
        return self.variants[name].epochs or self.finetune.epochs

    def variant_samples(self, name: str) -> int:
        return self.variants[name].num_samples or self.finetune.num_samples

    def variant_objective(self, name: str) -> str | None:
        """The pretraining objective a variant's init comes from (None: random init)."""
        kind = self.variant_kind(name)
        if kind in ("spt", "spt_cross") and self.pretrain is not None:
            return self.pretrain.objective  # `spt` follows pretrain.objective (masked by default)
        return PRETRAINING_OF.get(kind)

    def variant_source(self, name: str) -> PretrainSource | None:
        """Which pretraining (objective, and task if not the study's own) a variant starts from."""
        objective = self.variant_objective(name)
        if objective is None:
            return None
        source = self.variants[name].source_task if self.variant_kind(name) == "spt_cross" else None
        return PretrainSource(objective, source)

    def pretraining_sources(self) -> list[PretrainSource]:
        """Distinct pretraining runs the variants need (each runs once and is shared)."""
        found: dict[str, PretrainSource] = {}
        for name in self.variants:
            source = self.variant_source(name)
            if source is not None:
                found.setdefault(source.stage_name, source)
        return sorted(found.values(), key=lambda s: (s.task is not None, s.objective != "masked", s.stage_name))

    def pretraining_objectives(self) -> list[str]:
        return sorted({s.objective for s in self.pretraining_sources()})

    def needs_pretraining(self) -> bool:
        return bool(self.pretraining_objectives())


# ---------------------------------------------------------------- reading


def read_yaml(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise SpecError(str(path), "spec file not found", "check the path; specs live in search_spaces/")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise SpecError(where, f"YAML syntax error ({problem})", "fix the YAML at that line") from err
    if not isinstance(data, dict):
        raise SpecError(
            str(path), "the spec must be a YAML mapping at the top level", "start from search_spaces/digits_quick.yaml"
        )
    return data


def apply_override(data: dict[str, Any], assignment: str) -> None:
    """Apply one ``--set a.b.c=value`` (value parsed as YAML) in place."""
    if "=" not in assignment:
        raise SpecError(f"--set {assignment}", "expected KEY.PATH=VALUE", "e.g. --set finetune.epochs=5")
    path, raw = assignment.split("=", 1)
    keys = path.strip().split(".")
    try:
        value = yaml.safe_load(raw)
    except yaml.YAMLError as err:
        raise SpecError(
            f"--set {path}", f"value '{raw}' is not valid YAML", "quote strings, e.g. '[1e-4, 1e-3]'"
        ) from err
    node = data
    for i, key in enumerate(keys[:-1]):
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        if not isinstance(child, dict):
            raise SpecError(f"--set {path}", f"'{'.'.join(keys[: i + 1])}' is not a mapping", "set a leaf field")
        node = child
    node[keys[-1]] = value


def _loc_to_path(loc: tuple) -> str:
    return ".".join(str(p) for p in loc)


_FIX_BY_TYPE = {
    "extra_forbidden": "remove it or check its spelling against search_spaces/digits_quick.yaml",
    "missing": "add this field",
    "literal_error": "use one of the allowed values",
}


# Keys renamed since an earlier release: old key -> new key (a spec using the old one is refused).
RENAMED_KEYS = {"seeds": "rerun_seeds"}


def _refuse_renamed(data: dict[str, Any]) -> None:
    for old, new in RENAMED_KEYS.items():
        if old in data:
            raise SpecError(old, f"'{old}' was renamed to '{new}'", f"write {new}: {data[old]!r} instead")


def from_dict(data: dict[str, Any]) -> SweepSpec:
    _refuse_renamed(data)
    try:
        spec = SweepSpec.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        path = _loc_to_path(first["loc"])
        if first["type"] == "extra_forbidden":
            problem = "unknown key"
        else:
            problem = f"{first['msg']} (got {first.get('input')!r})"
        fix = _FIX_BY_TYPE.get(first["type"], "give a value of the expected type")
        extra = f" ({len(err.errors()) - 1} more problems)" if len(err.errors()) > 1 else ""
        raise SpecError(path, problem + extra, fix) from None
    check_semantics(spec)
    return spec


def load_spec(path: str | Path, overrides: list[str] | None = None) -> SweepSpec:
    data = read_yaml(path)
    for assignment in overrides or []:
        apply_override(data, assignment)
    return from_dict(data)


# ---------------------------------------------------------------- meaning


def _check_param(path: str, name: str, p: ParamSpace) -> None:
    if p.type in ("loguniform", "uniform"):
        if p.values is not None:
            raise SpecError(
                f"{path}.values", f"a {p.type} range takes low/high, not values", "drop values or use type: grid"
            )
        for bound in ("low", "high"):
            if getattr(p, bound) is None:
                raise SpecError(f"{path}.{bound}", f"a {p.type} range needs '{bound}'", f"add {bound}: <number>")
        if p.type == "loguniform" and p.low <= 0:
            raise SpecError(f"{path}.low", f"must be > 0 for a log-uniform range (got {p.low})", "use e.g. 1e-5")
        if p.low >= p.high:
            raise SpecError(f"{path}.low", f"low {p.low} is not below high {p.high}", "swap them or widen the range")
    else:
        if p.low is not None or p.high is not None:
            raise SpecError(f"{path}.low", f"a {p.type} takes values, not low/high", "use type: loguniform for a range")
        if not p.values:
            raise SpecError(f"{path}.values", "empty list of values", "list at least one value")
    for i, v in enumerate(p.candidates()):
        if not v > 0:
            raise SpecError(
                f"{path}.values[{i}]" if p.values else f"{path}.low",
                f"{name} must be > 0 (got {v})",
                f"use a positive {name}",
            )
        if name == "batch_size" and float(v) != int(v):
            raise SpecError(f"{path}.values[{i}]", f"batch_size must be an integer (got {v})", "use whole numbers")
    if name == "batch_size" and p.type in ("loguniform", "uniform"):
        raise SpecError(f"{path}.type", "batch_size needs a discrete list", "use type: choice or grid with values")


def _check_search(path: str, search: SearchSpec) -> None:
    for name, p in search.items():
        _check_param(f"{path}.{name}", name, p)


def _positive(path: str, value: float, what: str = "must be >= 1") -> None:
    if value < 1:
        raise SpecError(path, f"{what} (got {value})", "use a positive number")


def check_semantics(spec: SweepSpec) -> None:
    m = spec.model
    for f in ("d_model", "n_layers", "n_heads", "d_ff"):
        _positive(f"model.{f}", getattr(m, f))
    if m.d_model % m.n_heads:
        raise SpecError(
            "model.n_heads",
            f"d_model {m.d_model} is not divisible by n_heads {m.n_heads}",
            "pick n_heads dividing d_model",
        )
    if m.positions == "rotary" and (m.d_model // m.n_heads) % 2:
        raise SpecError("model.positions", "rotary positions need an even head size", "use an even d_model / n_heads")
    if not 0 <= m.dropout < 1:
        raise SpecError("model.dropout", f"must be in [0, 1) (got {m.dropout})", "use e.g. 0.1")
    if not 0 <= m.attention_dropout < 1:
        raise SpecError("model.attention_dropout", f"must be in [0, 1) (got {m.attention_dropout})", "use 0.0")
    if m.family == "ssm":
        _positive("model.ssm_state", m.ssm_state)
        attention_only = [
            v for v in spec.variants if spec.variant_kind(v) in ("qk_init", "frozen_attn", "frozen_attn_mlp")
        ]
        if attention_only:
            raise SpecError(
                f"variants.{attention_only[0]}",
                "this variant is defined on attention weights",
                "use model.family: transformer, or drop the variant",
            )
    if not spec.variants:
        raise SpecError("variants", "no variants to compare", "add at least 'scratch' and 'spt'")
    _positive("finetune.epochs", spec.finetune.epochs)
    _positive("finetune.num_samples", spec.finetune.num_samples)
    for name, v in spec.variants.items():
        kind = spec.variant_kind(name)
        if kind not in VARIANT_KINDS:
            where = f"variants.{name}.kind" if v.kind else f"variants.{name}"
            raise SpecError(
                where, f"unknown variant kind '{kind}'", f"use one of: {', '.join(VARIANT_KINDS)} (or set kind:)"
            )
        _check_search(f"variants.{name}.search", v.search)
        if v.epochs is not None:
            _positive(f"variants.{name}.epochs", v.epochs)
        if v.num_samples is not None:
            _positive(f"variants.{name}.num_samples", v.num_samples)
    _check_pretrain(spec)
    for name, v in spec.variants.items():
        is_cross = spec.variant_kind(name) == "spt_cross"
        if is_cross and v.source_task is None:
            raise SpecError(
                f"variants.{name}.source_task",
                "spt_cross needs the task to pretrain on",
                "add source_task: {name: TASK} (e.g. listops)",
            )
        if not is_cross and v.source_task is not None:
            raise SpecError(
                f"variants.{name}.source_task",
                "only spt_cross variants pretrain on another task",
                "set kind: spt_cross or remove source_task",
            )
    uses_lm = [v for v in spec.variants if spec.variant_kind(v) in LANGUAGE_MODEL_KINDS]
    if uses_lm and spec.language_model is None:
        raise SpecError(
            f"variants.{uses_lm[0]}",
            "this variant needs a pretrained language model",
            "add language_model: {path: DIR} with a local Hugging Face checkpoint (e.g. GPT-2)",
        )
    _check_scheduler(spec)
    if spec.rerun_seeds < 1:
        raise SpecError("rerun_seeds", f"must be >= 1 (got {spec.rerun_seeds})", "use 1 (no re-training) or e.g. 3")
    if spec.max_failures < 0:
        raise SpecError("max_failures", f"must be >= 0 (got {spec.max_failures})", "use 0 for no retries")
    r = spec.resources
    if r.cpu <= 0 or r.gpu < 0:
        raise SpecError(
            "resources.cpu", f"cpu must be > 0 and gpu >= 0 (got {r.cpu}, {r.gpu})", "e.g. cpu: 1, gpu: 0.25"
        )
    if r.max_concurrent is not None:
        _positive("resources.max_concurrent", r.max_concurrent)


def _check_pretrain(spec: SweepSpec) -> None:
    p = spec.pretrain
    if spec.needs_pretraining() and (p is None or not p.enabled):
        raise SpecError(
            "pretrain",
            "variants initialised from SPT need a pretraining stage",
            "add a pretrain: section (see digits_quick.yaml)",
        )
    if p is None:
        return
    if not 0 < p.mask_ratio < 1:
        raise SpecError(
            "pretrain.mask_ratio",
            f"must be in (0, 1) (got {p.mask_ratio})",
            "use 0.5 for images, 0.15 for text, 0.1 for ListOps",
        )
    if p.epochs < 0:  # 0 is the budget axis' origin: SPT variants start from an untrained encoder
        raise SpecError("pretrain.epochs", f"must be >= 0 (got {p.epochs})", "use 0 for no pretraining")
    _positive("pretrain.num_samples", p.num_samples)
    _check_search("pretrain.search", p.search)


def _check_scheduler(spec: SweepSpec) -> None:
    s = spec.scheduler
    if s.type != "asha":
        return
    _positive("scheduler.grace_period", s.grace_period)
    if s.reduction_factor <= 1:
        raise SpecError("scheduler.reduction_factor", f"must be > 1 (got {s.reduction_factor})", "use 2 or 3")
    pretrain_epochs = [spec.pretrain.epochs] if spec.pretrain and spec.pretrain.epochs > 0 else []
    shortest = min([spec.variant_epochs(v) for v in spec.variants] + pretrain_epochs)
    if s.grace_period > shortest:
        raise SpecError(
            "scheduler.grace_period",
            f"{s.grace_period} exceeds the shortest stage ({shortest} epochs)",
            "lower grace_period",
        )
