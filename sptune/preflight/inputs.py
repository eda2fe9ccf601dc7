"""A spec checked against the data it names: the spec, its task's splits and the plan.

This is what `--dry-run` prints; nothing here starts Ray, touches MLflow or writes a file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sptune.errors import SpecError, SptuneError
from sptune.plan.study_plan import StudyPlan, build_plan
from sptune.plan.warmups import long_warmups
from sptune.spec import SweepSpec
from sptune.spec.plugin_refs import BUILT_IN_FAMILIES
from sptune.spec.reading import read_yaml, spec_from_mapping
from sptune.tasks import TaskRequest, check_task, load_task
from sptune.tasks.base import TaskInfo, TaskSplits
from sptune.tasks.registry import resolve_data_dir


@dataclass(frozen=True)
class StudyInputs:
    spec: SweepSpec
    data: TaskSplits
    plan: StudyPlan


def load_inputs(source: Path | Mapping[str, Any], overrides: tuple[str, ...], data_dir: str | None) -> StudyInputs:
    """The spec (a file, or its mapping given in Python) with its overrides, checked against its data."""
    spec = spec_from_mapping(source if isinstance(source, Mapping) else read_yaml(source), overrides)
    _absolute_paths(spec)
    data = _load_checked(spec, spec.task.name, spec.task.options, data_dir)
    _check_batch_sizes(spec, len(data.train))
    _check_plugin_family(spec, data.info)
    _check_given_models(spec, data.info)
    summary = (
        f"{len(data.train)} train / {len(data.val)} val from {data.source or spec.task.name}; "
        "test split sealed until the final evaluation"
    ) + _truncation_note(data)
    sources = _load_source_tasks(spec, data_dir)
    plan = build_plan(spec, data.info, data_summary=summary, source_data=sources, train_rows=len(data.train),
                      val_rows=len(data.val))
    _check_inherited_warmups(plan)
    return StudyInputs(spec, data, plan)


def _truncation_note(data: TaskSplits) -> str:
    """How many rows a reader cut at the task's length (the hf task counts them), for the dry run's data line."""
    cut = data.details.get("truncated")
    if not cut:
        return ""
    counts = ", ".join(f"{n} {role}" for role, n in cut.items())
    return f"; rows cut at {data.info.seq_len} tokens: {counts}"


def _check_inherited_warmups(plan: StudyPlan) -> None:
    """A warm-up taken from the task's defaults (sized for the reference's full budgets) that lasts a whole stage
    of this spec's smaller budget: the LR would never reach the peak the search asks for. One the spec wrote
    itself is stated in the plan instead."""
    for found in long_warmups(plan):
        if found.inherited:
            raise SpecError(
                found.field, f"task '{plan.spec.task.name}' defaults to a warm-up of {found.steps} optimizer steps "
                f"(the reference's), but {found.search.label} trains {found.budget_steps} steps at its largest "
                "batch: its LR would never reach the peak the search asks for",
                f"write {found.field}: N below {found.budget_steps} (e.g. {max(1, found.budget_steps // 10)}), or "
                "training.warmup_fraction: 0.1 (a share of each budget instead of the task's steps)")


def _absolute_paths(spec: SweepSpec) -> None:
    """Trials run in their own working directories (possibly on other nodes): file paths in
    the spec are resolved against the directory the user ran the command from."""
    if spec.language_model is not None:
        spec.language_model.path = str(Path(spec.language_model.path).expanduser().resolve())
    if spec.pretrain is not None and spec.pretrain.checkpoint:
        spec.pretrain.checkpoint = str(Path(spec.pretrain.checkpoint).expanduser().resolve())


def _load_checked(spec: SweepSpec, task: str, options: dict, data_dir: str | None) -> TaskSplits:
    request = TaskRequest(task, options, spec.seed, resolve_data_dir(data_dir))
    check_task(request)
    data = load_task(request)
    _check_spec_against_task(spec, data.info)
    _check_attention_kernel(spec, data)
    return data


def _check_batch_sizes(spec: SweepSpec, rows: int) -> None:
    """A batch search with a batch size that fits the training rows: where none does, every trial would take the
    whole set as one batch, whatever its batch size says (a typo, or a spec meant for the full data on a
    max_train / train_fraction subset). Where some do, the plan names the ones that do not."""
    searches = [(f"variants.{name}.search.batch_size", v.search) for name, v in spec.variants.items()]
    own_pretraining = any(s.task is None for s in spec.pretraining_sources())
    if spec.pretrain is not None and own_pretraining and spec.pretrain.checkpoint is None:
        searches.insert(0, ("pretrain.search.batch_size", spec.pretrain.search))
    for where, search in searches:
        smallest = min(search.batch_size.candidates())
        if smallest > rows:
            raise SpecError(where, f"a batch of {smallest:g} exceeds the {rows} training rows of task "
                            f"'{spec.task.name}' (after max_train and train_fraction)",
                            f"use batch sizes <= {rows}, or train on more rows")


def _check_spec_against_task(spec: SweepSpec, info: TaskInfo) -> None:
    p = spec.pretrain
    if p is not None and spec.needs_pretraining() and info.input_kind == "tokens" and p.loss != "ce":
        raise SpecError(
            "pretrain.loss", f"task '{info.name}' has token inputs; '{p.loss}' needs continuous values", "use loss: ce"
        )


def _check_attention_kernel(spec: SweepSpec, data: TaskSplits) -> None:
    """``model.attention_kernel: flash`` must be able to run, or the trials would fail one by one."""
    if spec.model.attention_kernel != "flash":
        return
    from sptune.training.models.attention import flash_installed  # here: torch only for a spec that asks for flash

    auto = "or use attention_kernel: auto (flash-attn where it can run, else SDPA)"
    if spec.training.device == "cpu" or spec.training.precision == "fp32":
        raise SpecError("model.attention_kernel", "flash-attn runs on CUDA in bf16/fp16 only",
                        f"set training.device: auto and training.precision: bf16, {auto}")
    info = data.info
    if info.input_kind == "tokens" and any(bool((s.x == info.pad_id).any()) for s in (data.train, data.val)):
        raise SpecError("model.attention_kernel", f"task '{info.name}' has padded sequences, and flash-attn's "
                        "flash_attn_func takes no key-padding mask", f"use attention_kernel: sdpa, {auto}")
    if not flash_installed():
        raise SpecError("model.attention_kernel", "is 'flash' but flash-attn is not installed on this machine",
                        f"pip install -e '.[gpu]' on a CUDA machine, {auto}")


def _check_plugin_family(spec: SweepSpec, info: TaskInfo) -> None:
    """A plug-in model family must support the spec's variant kinds and return what the heads read."""
    if spec.model.family in BUILT_IN_FAMILIES:
        return
    from sptune.training.models.family_check import check_plugin_family  # torch only for a plug-in family

    check_plugin_family(spec, info)


def _check_given_models(spec: SweepSpec, info: TaskInfo) -> None:
    """A given SPT checkpoint or language model must load and fit, or nothing starts."""
    if spec.pretrain is not None and spec.pretrain.checkpoint:  # torch only for a spec that gives a model
        from sptune.training.checkpoint_files import check_spt_checkpoint
        from sptune.training.model_configs import encoder_config
        from sptune.training.models.families import build_encoder

        check_spt_checkpoint(spec.pretrain.checkpoint, build_encoder(encoder_config(spec.model, info)))
    if spec.language_model is not None:  # torch only for a spec that gives a model
        from sptune.training.models.lm import check_language_model

        check_language_model(spec.language_model.path, info.seq_len)


def _load_source_tasks(spec: SweepSpec, data_dir: str | None) -> dict[str, TaskSplits]:
    """spt_cross: the other tasks to pretrain on, checked and loaded like the study's own."""
    loaded: dict[str, TaskSplits] = {}
    for source in spec.pretraining_sources():
        if source.task is None:
            continue
        where = next(
            f"variants.{v}.source_task"
            for v in spec.variants
            if (s := spec.variant_source(v)) is not None and s.stage_name == source.stage_name
        )
        try:
            loaded[source.stage_name] = _load_checked(spec, source.task.name, source.task.options, data_dir)
        except SptuneError as err:
            raise type(err)(f"{where} ({err.where})", err.problem, err.fix) from None
    return loaded
