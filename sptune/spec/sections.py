"""The spec's sections, each with the rules that need nothing outside it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, StrictBool, field_validator, model_validator
from pydantic_core import PydanticCustomError

from sptune.rules.lr_extension import MAX_EXTENSION_ROUNDS
from sptune.rules.seeds import MAX_CANDIDATE_SEEDS, MAX_GRID_REPEATS
from sptune.spec.budget import repeated_choice_problem, written_budget_problem
from sptune.spec.fields import POSITIVE, Strict, problem, ranged
from sptune.spec.plugin_refs import family_problem
from sptune.spec.search import SearchSpec
from sptune.spec.tracking_uri import FIX as TRACKING_FIX
from sptune.spec.tracking_uri import tracking_uri_problem

RESOURCES = "e.g. cpu: 1, gpu: 0.25"
STEPS = "use a positive number of optimizer steps, e.g. 2000"
# Repeats of a grid point use seeds seed, seed+1, ...: capped below the re-runs' seeds (sptune.rules.seeds).
REPEATS = f"use 1 (each grid point once) up to {MAX_GRID_REPEATS}"


def budget_unit_problem(written: set[str], steps: int | None, eval_every: int | None) -> PydanticCustomError | None:
    """A section's budget is its epochs or its steps (sptune.rules.budgets), never both; eval_every splits steps."""
    if steps is not None and "epochs" in written:
        message = f"both steps ({steps}) and epochs are set: a section's budget is one or the other"
        fix = "drop epochs (on the command line: --set SECTION.epochs=null) or steps; eval_every sets the rounds"
        return problem(message, fix, "epochs")
    if eval_every is not None and steps is None:
        message = "eval_every splits a steps budget into evaluation rounds; this section's budget is in epochs"
        return problem(message, "add steps: N, or drop eval_every", "eval_every")
    if eval_every is not None and eval_every > steps:
        message = f"eval_every {eval_every} exceeds the budget of {steps} steps: no full evaluation round"
        return problem(message, f"use eval_every <= {steps}, e.g. {max(1, steps // 10)}", "eval_every")
    return None


def without_null_epochs(data: Any) -> Any:
    """`epochs: null` (e.g. --set finetune.epochs=null beside steps) counts as not written."""
    if isinstance(data, dict) and "epochs" in data and data["epochs"] is None:
        return {k: v for k, v in data.items() if k != "epochs"}
    return data


def repeats_field(default: int | None) -> int | None:
    """The grid_repeats field: how many times (each with its own seed) a grid search trains each grid point."""
    return ranged(default, REPEATS, ge=1, le=MAX_GRID_REPEATS)


class TaskSpec(BaseModel):
    # Task-specific options (e.g. resolution) are checked against the task registry.
    model_config = ConfigDict(extra="allow")
    name: str

    @property
    def options(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


@dataclass(frozen=True)
class PretrainSource:
    """One pretraining run: an objective on the study's task, or on another task (spt_cross)."""

    objective: str
    task: TaskSpec | None = None

    @property
    def stage_name(self) -> str:
        # The masked objective on the study's own task keeps the plain name: the common case.
        name = "pretrain" if self.objective == "masked" else f"pretrain-{self.objective}"
        if self.task is not None:
            options = "-".join(f"{k}{v}" for k, v in sorted(self.task.options.items()))
            name += f"-on-{self.task.name}" + (f"-{options}" if options else "")
        return name


class ModelSpec(Strict):
    # transformer, ssm, an installed plug-in's entry point name, or a plug-in's import path (module:attr).
    family: str = "transformer"
    # A plug-in family's own options (its factory reads them); the built-ins take none.
    options: dict[str, Any] = {}
    ssm_state: int = 64  # state size of the diagonal SSM layers (family: ssm)
    d_model: int = ranged(64, POSITIVE, ge=1)
    n_layers: int = ranged(3, POSITIVE, ge=1)
    n_heads: int = ranged(4, POSITIVE, ge=1)
    d_ff: int = ranged(128, POSITIVE, ge=1)
    dropout: float = ranged(0.1, "use e.g. 0.1", ge=0, lt=1)
    # > 0 disables the fast fused attention kernels
    attention_dropout: float = ranged(0.0, "use 0.0", ge=0, lt=1)
    # sinusoidal: the reference's fixed table; learned: a table initialised at std 0.02; rotary: relative
    # positions inside attention. A task's own default comes from sptune.spec.task_defaults.
    positions: Literal["sinusoidal", "rotary", "learned", "none"] = "sinusoidal"
    # auto: flash-attn 2 where it can run (CUDA, bf16/fp16, head size a multiple of 8 up to 256, no
    # padding in the batch), else PyTorch SDPA; sdpa/flash force one (flash: an error where it can't).
    attention_kernel: Literal["auto", "sdpa", "flash"] = "auto"
    pooling: Literal["mean", "max", "last", "cls"] = "max"

    @model_validator(mode="after")
    def _shapes_fit(self) -> ModelSpec:
        found = family_problem(self.family, self.options, self.pooling, self.attention_kernel)
        if found:
            raise found
        if self.d_model % self.n_heads:
            message = f"d_model {self.d_model} is not divisible by n_heads {self.n_heads}"
            raise problem(message, "pick n_heads dividing d_model", "n_heads")
        if self.positions == "rotary" and (self.d_model // self.n_heads) % 2:
            raise problem("rotary positions need an even head size", "use an even d_model / n_heads", "positions")
        if self.attention_kernel == "flash":
            self._flash_fits()
        # Checked only where it is used: a transformer spec may carry any ssm_state.
        if self.family == "ssm" and self.ssm_state < 1:
            raise problem(f"must be >= 1 (got {self.ssm_state})", POSITIVE, "ssm_state")
        return self

    def _flash_fits(self) -> None:
        # The shape limits of flash-attn 2 (sptune.training.models.attention.flash_unsupported); whether
        # it is installed, and the precision, are checked by preflight.
        if self.family == "ssm":
            raise problem("an SSM has no attention", "use attention_kernel: auto", "attention_kernel")
        head = self.d_model // self.n_heads
        if head % 8 or head > 256:
            message = f"flash-attn needs a head size (d_model / n_heads) that is a multiple of 8 up to 256 (got {head})"
            fix = "use attention_kernel: auto or sdpa, or change d_model / n_heads"
            raise problem(message, fix, "attention_kernel")


class PretrainSpec(Strict):
    enabled: bool = True
    objective: Literal["masked", "causal"] = "masked"
    mask_ratio: float = ranged(0.5, "use 0.5 for images, 0.15 for text, 0.1 for ListOps", gt=0, lt=1)
    loss: Literal["ce", "l1", "l2"] = "l2"
    # 0 is the budget axis' origin: SPT variants start from an untrained encoder.
    epochs: int = ranged(10, "use a number of pretraining epochs, e.g. 10 (0: SPT variants start from an "
                         "untrained encoder, a budget axis' origin)", ge=0)
    # The budget in optimizer steps instead of epochs, evaluated every eval_every steps (default: 10 rounds);
    # every trial then does the same steps whatever its batch size (sptune.rules.budgets).
    steps: int | None = ranged(None, STEPS, ge=1)
    eval_every: int | None = ranged(None, POSITIVE, ge=1)
    # Trials of a search without a grid (Optuna/random draws); a grid search ignores it.
    num_samples: int = ranged(4, POSITIVE, ge=1)
    # A grid search trains each grid point this many times, repeat r with seed + r (sptune.rules.seeds).
    grid_repeats: int = repeats_field(1)
    weight_decay: float = 0.0
    # Pretraining's own warm-up in optimizer steps (the reference warms up longer here); None: training's warm-up.
    warmup_steps: int | None = ranged(None, "use e.g. 2500 (the reference's on Image)", ge=1)
    # Pretraining's own LR shape after the warm-up; None: training's. Pretraining runs a fixed budget (no early
    # stopping), so a cosine decay to 0 ends it converged where a constant LR leaves it on a noisy plateau.
    schedule: Literal["cosine", "constant"] | None = None
    search: SearchSpec
    # Reuse an existing SPT checkpoint (an sptune state.pt, or the folder holding it) for
    # the `objective` stage instead of pretraining again.
    checkpoint: str | None = None

    _null_epochs = model_validator(mode="before")(without_null_epochs)

    @model_validator(mode="after")
    def _budget_fits_search(self) -> PretrainSpec:
        written = self.model_fields_set
        samples = self.num_samples if "num_samples" in written else None
        repeats = self.grid_repeats if "grid_repeats" in written else None
        found = written_budget_problem(self.search, samples, repeats)
        found = found or repeated_choice_problem(self.search, self.num_samples)
        found = found or budget_unit_problem(written, self.steps, self.eval_every)
        if found:
            raise found
        if self.search.lr.extend:
            message = "extend applies to a variant's LR search (the pretraining's pick starts its SPT variants at once)"
            raise problem(message, "drop extend here; set it on each variant's search.lr", "search.lr.extend")
        return self


class UntilConverged(Strict):
    """Train past the nominal epochs until validation has not improved for `patience` epochs (at most max_epochs);
    the LR schedule then spans max_epochs, so the rate is still above 0 past the nominal epochs."""

    patience: int = ranged(..., "use e.g. 3", ge=1)
    max_epochs: int = ranged(..., "use e.g. twice the finetuning epochs", ge=1)


class FinetuneSpec(Strict):
    epochs: int = ranged(10, POSITIVE, ge=1)
    # As in pretrain: a budget in optimizer steps, evaluated every eval_every steps (default: 10 rounds).
    steps: int | None = ranged(None, STEPS, ge=1)
    eval_every: int | None = ranged(None, POSITIVE, ge=1)
    # Opt-in: each trial trains on past `epochs` while validation improves (sptune.judging.convergence).
    until_converged: UntilConverged | None = None
    # Defaults of every variant: trials of a search without a grid (Optuna/random draws) ...
    num_samples: int = ranged(4, POSITIVE, ge=1)
    # ... and how many times a grid search trains each grid point (repeat r with seed + r).
    grid_repeats: int = repeats_field(1)
    weight_decay: float = 0.0

    _null_epochs = model_validator(mode="before")(without_null_epochs)

    @model_validator(mode="after")
    def _one_budget(self) -> FinetuneSpec:
        found = budget_unit_problem(self.model_fields_set, self.steps, self.eval_every)
        if found:
            raise found
        if self.until_converged is not None and self.steps is not None:
            message = "until_converged counts epochs; a steps budget is a fixed number of optimizer steps"
            raise problem(message, "drop until_converged, or give finetune epochs instead of steps", "until_converged")
        return self


class VariantSpec(Strict):
    # The kind defaults to the variant's name; SweepSpec checks it against the kinds table.
    kind: str | None = None
    search: SearchSpec
    # spt_cross: pretrain on this task instead of the study's own (A -> B transfer).
    source_task: TaskSpec | None = None
    # None: finetune's. num_samples: trials of a search without a grid; grid_repeats: runs of each
    # grid point of a grid search, each with its own seed (the spec's seed + the repeat index).
    num_samples: int | None = ranged(None, POSITIVE, ge=1)
    grid_repeats: int | None = repeats_field(None)
    epochs: int | None = ranged(None, POSITIVE, ge=1)

    @model_validator(mode="after")
    def _budget_fits_search(self) -> VariantSpec:
        # Only what this section writes; the finetune: defaults are checked by SweepSpec.
        found = written_budget_problem(self.search, self.num_samples, self.grid_repeats)
        if found:
            raise found
        return self


class SchedulerSpec(Strict):
    # sha (default): synchronous successive halving per variant, the same decisions in any finish order;
    # hyperband: brackets of sha from later and later rungs, the last without early stopping (order-independent
    # too); asha: asynchronous, faster, but who survives depends on finish order; fifo: no early stopping.
    type: Literal["sha", "hyperband", "asha", "fifo"] = "sha"
    grace_period: int = 2
    reduction_factor: float = 2.0

    @model_validator(mode="after")
    def _halving_settings(self) -> SchedulerSpec:
        # FIFO ignores both settings, so they are only checked for the halving schedulers.
        if self.type == "fifo":
            return self
        if self.grace_period < 1:
            raise problem(f"must be >= 1 (got {self.grace_period})", POSITIVE, "grace_period")
        if self.reduction_factor <= 1:
            raise problem(f"must be > 1 (got {self.reduction_factor})", "use 2 or 3", "reduction_factor")
        return self


class SearcherSpec(Strict):
    # Used for range searches; grids always run through Ray's grid (BasicVariantGenerator).
    type: Literal["optuna", "random"] = "optuna"
    # batched: Optuna proposes batch_size configs per variant, then waits until all of them have
    # reported and is told their results in trial order, so its proposals do not depend on finish
    # order; async: told results as trials finish, so no slot waits (faster), but what it proposes
    # depends on the machine's load. Random and grid searches never depend on it.
    mode: Literal["batched", "async"] = "batched"
    # Fixed, never the number of trials that fit at once: the same spec proposes the same configs on
    # every machine (why 4: docs/design/tuning.md).
    batch_size: int = ranged(4, "use a positive number of trials, e.g. 4", ge=1)
    # Optuna only. false: TPE models each parameter on its own (Optuna's default). true: one joint model
    # of all of them (multivariate TPE), which can follow an optimum that moves with another parameter
    # (the best LR grows with the batch size) where the independent model averages it away.
    multivariate: bool = False


class SelectionSpec(Strict):
    """Seed-robust selection, off by default (top_k 1, seeds 0): before a variant's pick, its `top_k` best search
    configs (the one ranking rule; all of them in a search with fewer) are re-trained with `seeds` seeds no search
    trial and no re-run uses, to the end; the pick is the best mean validation score
    (sptune.judging.robust_selection). One section for the study, so every variant's pick is made by one rule."""

    top_k: int = ranged(1, "use e.g. 3 (1: the search's best alone)", ge=1)
    seeds: int = ranged(0, "use e.g. 3 (0: off)", ge=0, le=MAX_CANDIDATE_SEEDS)

    @property
    def enabled(self) -> bool:
        return self.seeds > 0

    @model_validator(mode="after")
    def _both_or_neither(self) -> SelectionSpec:
        if self.top_k > 1 and not self.seeds:
            raise problem(f"top_k {self.top_k} candidates are compared over seeds, but seeds is 0",
                          "set seeds: 3 (or more), or drop top_k", "seeds")
        if self.top_k == 1 and self.seeds:
            raise problem("with top_k 1 the one candidate is the pick whatever its seeds score",
                          "use top_k: 3 (or more), or drop seeds", "top_k")
        return self


class LrExtendSpec(Strict):
    """How far a variant's search with `search.lr.extend: true` may go beyond its LR range: rounds of half a
    decade (sptune.rules.lr_extension). One setting for the study, so every extending variant may go as far;
    0 turns extension off for the whole study (e.g. from the command line)."""

    max_rounds: int = ranged(2, "use e.g. 2 (one decade beyond the bound), or 0 (off)", ge=0, le=MAX_EXTENSION_ROUNDS)


class ResourcesSpec(Strict):
    cpu: float = ranged(1.0, RESOURCES, gt=0)
    # A share of a GPU per trial (a pack is one trial), or auto: none on a machine without GPUs, and where there
    # are some, for a small model 1/2 of one per pack or 1/8 per unpacked trial (several fill a GPU one small
    # model leaves idle), a whole one for a large model (sptune.spec.gpu_share). auto counts the GPUs of the
    # machine the spec is read on (so does pack: auto): on a cluster reached with --address from a machine
    # without them, give the share (and the pack).
    gpu: float | Literal["auto"] = 0.0
    max_concurrent: int | None = ranged(None, POSITIVE, ge=1)
    # Trials of one stage trained K at a time as one fused model (sptune.training.packing; docs/design/training.md,
    # "Packs"): K members per pack, 1 for none, or auto: packs of 8 for a small model on a machine with GPUs
    # (sptune.spec.gpu_share), none on a CPU, where a fused pack trained fewer rows per core than one trial
    # (docs/design/tuning.md, "Packed trials"), nor where a spec's settings refuse packs.
    pack: int | Literal["auto"] = 1
    # How a pack's executor trains its members each round: fused (one stacked model, one set of batched kernels:
    # what fills an idle GPU), looped (each member's own solo loop, one after another: the unpacked trial's exact
    # numbers, as no kernel sums in another order), or auto: fused on a GPU, looped on a CPU, where a fused pack
    # trained fewer rows per core than one trial (docs/design/tuning.md, "Packed trials").
    pack_fusion: Literal["auto", "fused", "looped"] = "auto"

    def fuses_packs(self, on_gpu: bool) -> bool:
        """Whether a pack's members train as one fused model on this kind of device (see `pack_fusion`)."""
        return self.pack_fusion == "fused" or (self.pack_fusion == "auto" and on_gpu)

    @field_validator("pack", mode="before")
    @classmethod
    def _pack_size(cls, pack: Any) -> Any:
        if pack == "auto":
            return pack  # resolved with the whole spec (SweepSpec), as gpu: auto is
        if isinstance(pack, bool) or not isinstance(pack, int) or pack < 1:
            raise problem(f"must be a whole number of trials per pack >= 1, or auto (got {pack!r})",
                          "use e.g. pack: 8 (8 trials of a stage as one model), pack: 1 (no packing) or pack: auto")
        return pack

    @field_validator("gpu", mode="before")
    @classmethod
    def _gpu_share(cls, gpu: Any) -> Any:
        if gpu == "auto":
            return gpu
        if isinstance(gpu, bool) or not isinstance(gpu, (int, float)) or gpu < 0:
            raise problem(f"must be a share of a GPU >= 0, or auto (got {gpu!r})", f"{RESOURCES}, or gpu: auto")
        return float(gpu)


class TrainingSpec(Strict):
    device: Literal["auto", "cpu", "cuda"] = "auto"
    precision: Literal["auto", "fp32", "bf16"] = "auto"
    # Linear warm-up over warmup_steps optimizer steps (when given) or this share of the budget's steps, then
    # cosine: decay to 0 at the budget's end; constant: the peak LR to the end (the reference's constant_warmup,
    # and the only schedule under which until_converged's "converged" is not a plateau of a still-high LR).
    # Early stopping's first rung (scheduler.grace_period) should come after the warm-up, or it ranks LRs
    # mid-warm-up (the plan warns when it does not).
    schedule: Literal["cosine", "constant"] = "cosine"
    warmup_fraction: float = ranged(0.1, "use e.g. 0.1", ge=0, lt=1)
    warmup_steps: int | None = ranged(None, "use e.g. 2000 (the reference's), or drop it for warmup_fraction", ge=1)
    grad_clip: float = ranged(1.0, "use e.g. 1.0, or 0 for no clipping", ge=0)  # 0: no clipping
    # torch.compile with static shapes (true), or the whole training step (forward, backward, clipping, AdamW)
    # captured as one CUDA graph ("cuda_graphs": one launch per full batch on a GPU; the epoch's short last batch
    # runs eagerly; on a CPU it compiles as true does). Off by default: compiling costs a minute or more per trial.
    compile: bool | Literal["cuda_graphs"] = False
    # PyTorch's deterministic algorithms (and cuDNN's deterministic, non-benchmarked kernels) in every trial:
    # GPU re-runs of a seed give the same numbers, at a cost in speed; an op without one raises.
    deterministic: StrictBool = False
    # AdamW's moment decay rates and epsilon (PyTorch's defaults).
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = ranged(1e-8, "use e.g. 1e-8", gt=0)

    @field_validator("compile", mode="before")
    @classmethod
    def _compile_setting(cls, value: Any) -> Any:
        if value not in (True, False, "cuda_graphs"):
            raise problem(f"must be true, false or cuda_graphs (got {value!r})",
                          "use true (static shapes) or cuda_graphs (also CUDA graphs, on a GPU)")
        return value

    @field_validator("betas")
    @classmethod
    def _betas_in_unit_interval(cls, betas: tuple[float, float]) -> tuple[float, float]:
        if not all(0 <= b < 1 for b in betas):
            raise problem(f"each beta must be in [0, 1) (got {list(betas)})", "use e.g. [0.9, 0.999]")
        return betas


class LanguageModelSpec(Strict):
    # A Hugging Face checkpoint directory on local disk (e.g. GPT-2 saved with save_pretrained).
    path: str


class TrackingSpec(Strict):
    experiment: str | None = None
    uri: str | None = None

    @field_validator("uri")
    @classmethod
    def _known_scheme(cls, uri: str | None) -> str | None:
        found = tracking_uri_problem(uri) if uri else None
        if found:
            raise problem(found, TRACKING_FIX)
        return uri
