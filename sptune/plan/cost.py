"""What a planned study costs: its trial-epochs per stage times measured seconds per epoch.

The seconds come from `epoch_seconds.yaml` (beside this module): measurements per task config and
device, each with where it came from. A config or device without one is "unknown", never guessed; an
entry marked ``estimate: true`` is arithmetic, not a measurement, and is printed as "estimated".
An epoch's time is linear in the training rows (docs/design/plan.md), so a measurement taken on another
number of rows is scaled to the plan's (its validation part, where the entry splits it off, to the plan's
validation rows).

A packed study (``resources.pack: K`` > 1) is priced per pack-epoch, not per member-epoch: one pack's epoch
trains all its members at once, and costs what an entry with ``pack:`` at least K says one pack's epoch costs
(docs/design/plan.md, "Packs"). A pack that loops its members (`resources.pack_fusion`, on a CPU by default)
trains them one after another: its epoch costs K of one trial's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from sptune.plan.packs import describe_pack_cost, rerun_packs, search_pack_epochs, selection_packs
from sptune.plan.selection_steps import selection_epochs
from sptune.plan.study_plan import SearchPlan, StudyPlan, search_epochs

TABLE = Path(__file__).with_name("epoch_seconds.yaml")
DEVICES = ("cpu", "gpu")


@dataclass(frozen=True)
class StageEpochs:
    """The most trial-epochs (or pack-epochs) a study spends, split by what one epoch costs: pretraining and
    finetuning (their sum is the plan's "at most N trial-epochs")."""

    pretrain: int
    finetune: int

    @property
    def total(self) -> int:
        return self.pretrain + self.finetune


@dataclass(frozen=True)
class Estimate:
    device: str
    seconds: float | None  # trial-seconds (one trial at a time) or pack-seconds; None: no entry for this config
    source: str = ""  # the measurement's name in epoch_seconds.yaml
    estimated: bool = False  # the entry is arithmetic (``estimate: true``), not a measurement
    pack: int = 1  # resources.pack: above 1 the seconds are the packs' epochs, one pack at a time
    pack_epochs: int = 0  # the pack-epochs priced (a packed plan's)


def epochs_per_round(plan: StudyPlan, search: SearchPlan) -> float:
    """The epochs one of a search's iterations covers: 1 with an epochs budget; with a steps budget the passes
    over the training rows its eval_every steps make at the largest searched batch size (an upper bound)."""
    budget = search.budget
    if budget is None or budget.unit == "epochs" or not plan.train_rows:
        return 1.0
    return budget.eval_every * max(search.space.batch_size.candidates()) / plan.train_rows


def stage_epochs(plan: StudyPlan) -> StageEpochs:
    """Trial-epochs per stage, counted as `sptune.plan.dry_run_text.describe` counts them (searches, what the
    variants' selections add, then re-runs);
    a steps budget's evaluation rounds counted as the epochs they cover (`epochs_per_round`)."""
    s = plan.spec
    reruns = s.rerun_seeds if s.rerun_seeds >= 2 else 0

    def epochs(search: SearchPlan, again: int, picking: int = 0) -> float:
        return (search_epochs(plan, search) + again * search.epochs + picking) * epochs_per_round(plan, search)

    pre = sum(epochs(x, reruns if s.rerun_pretrain and x.epochs > 0 else 0) for x in plan.pretrainings())
    fine = sum(epochs(x, reruns, selection_epochs(s, x)) for x in plan.variant_searches())
    return StageEpochs(math.ceil(pre), math.ceil(fine))


def stage_pack_epochs(plan: StudyPlan) -> StageEpochs:
    """Pack-epochs per stage, counted as `stage_epochs` counts trial-epochs: each search's packs while one of
    their members trains (sptune.plan.packs.search_pack_epochs), then the packs its selection and its re-runs
    fill, each to the end."""
    s = plan.spec
    reruns = rerun_packs(plan)

    def epochs(search: SearchPlan, again: int) -> float:
        return (search_pack_epochs(plan, search) + again * search.epochs) * epochs_per_round(plan, search)

    pre = sum(epochs(x, reruns if s.rerun_pretrain and x.epochs > 0 else 0) for x in plan.pretrainings())
    fine = sum(epochs(x, reruns + selection_packs(plan, x)) for x in plan.variant_searches())
    return StageEpochs(math.ceil(pre), math.ceil(fine))


@cache
def measurements(path: Path = TABLE) -> tuple[dict[str, Any], ...]:
    return tuple(yaml.safe_load(path.read_text()) or [])


def config_of(plan: StudyPlan) -> dict[str, Any]:
    """What a measurement must match: the task, its sequence length and the model's shape."""
    m = plan.spec.model
    return {"task": plan.info.name, "seq_len": plan.info.seq_len, "d_model": m.d_model,
            "n_layers": m.n_layers, "n_heads": m.n_heads, "d_ff": m.d_ff}


def pack_size(entry: dict[str, Any]) -> int:
    """The members of the pack an entry timed (1: one trial alone)."""
    return int(entry.get("pack", 1))


def looped(plan: StudyPlan, device: str) -> bool:
    """Whether the plan's packs train their members one after another on `device` (no fused model there)."""
    return plan.spec.resources.pack > 1 and not plan.spec.resources.fuses_packs(device == "gpu")


def matching_entry(plan: StudyPlan, device: str, table: tuple[dict[str, Any], ...]) -> dict[str, Any] | None:
    """The entry that prices the plan on `device`: unpacked or looped, the first one-trial entry of its config;
    fused packs of K, the entry of the smallest pack of at least K members (the first of them): a pack of fewer
    members, or one whose members stopped, is priced as that full pack, which trains more per step."""
    size = 1 if looped(plan, device) else plan.spec.resources.pack
    config = config_of(plan)
    found = [e for e in table if e["device"] == device and e["match"] == config]
    if size == 1:
        return next((e for e in found if pack_size(e) == 1), None)
    fits = [e for e in found if pack_size(e) >= size]
    return min(fits, key=pack_size) if fits else None


def epoch_seconds(entry: dict[str, Any], stage: str, plan: StudyPlan) -> float:
    """One epoch of `stage` (pretrain | finetune) at the plan's rows: the training part scaled by training rows;
    the validation part (``val_seconds``, where the entry gives it) by validation rows."""
    total, val = entry["seconds"], entry.get("val_seconds", {})
    seconds = total.get(stage, total["finetune"])
    validation = val.get(stage, val.get("finetune", 0.0))
    train_scale = (plan.train_rows or entry["train_rows"]) / entry["train_rows"]
    val_scale = plan.val_rows / entry["val_rows"] if plan.val_rows and entry.get("val_rows") else train_scale
    return (seconds - validation) * train_scale + validation * val_scale


def estimate(plan: StudyPlan, device: str, table: tuple[dict[str, Any], ...] | None = None) -> Estimate:
    """Seconds of the plan on `device` from its matching entry: trial-epochs times one trial's epoch, or for a
    packed plan pack-epochs times one pack's epoch."""
    size = plan.spec.resources.pack
    entry = matching_entry(plan, device, measurements() if table is None else table)
    if entry is None:  # what to measure: a pack's epoch, or where packs loop one trial's
        return Estimate(device, None, pack=1 if looped(plan, device) else size)
    epochs = stage_epochs(plan) if size == 1 else stage_pack_epochs(plan)
    members = size if looped(plan, device) else 1  # a looped pack-epoch: each member's epoch in turn
    total = members * (epochs.pretrain * epoch_seconds(entry, "pretrain", plan)
                       + epochs.finetune * epoch_seconds(entry, "finetune", plan))
    source = f"{size} × one trial's epoch, looped: {entry['name']}" if members > 1 else entry["name"]
    return Estimate(device, total, source, entry.get("estimate", False) is True, size,
                    epochs.total if size > 1 else 0)


def _hours(seconds: float) -> str:
    if seconds < 3600:  # a short study (one GPU call's): minutes, where 2 decimals of an hour are 36 s apart
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h" if seconds < 36_000 else f"{seconds / 3600:,.0f} h"


# How to fill a gap in the table, printed wherever a cost is unknown.
MEASURE_HINT = "measure one with `python tools/epoch_seconds.py --spec SPEC` on {where} and add it to {table}"
PACK_HINT = ("time one pack's epoch on {where} (the device kit's pack arms, tools/device/gpu_epoch_arms.txt) and add "
             "it to {table} with `pack: {size}`")
TABLE_NAME = TABLE.relative_to(TABLE.parents[2]).as_posix()  # as the user finds it: sptune/plan/...
WHERE = {"cpu": "a quiet CPU core", "gpu": "a GPU"}


def describe_estimate(e: Estimate, concurrency: int) -> str:
    if e.seconds is None:
        return f"{e.device}: unknown ({_missing(e)})"
    if e.pack > 1:  # packs that fill the device gain nothing from sharing it: the sum is what to plan for
        at_once = f"; up to {concurrency} packs at once: less only where they leave the device idle" \
            if concurrency > 1 else ""
        return (f"{e.device}: {_hours(e.seconds)} of pack time ({e.pack_epochs} pack-epochs, one pack at a time"
                f"{at_once}; {_kind(e)}: {e.source})")
    wall = f"{_hours(e.seconds / concurrency)} wall at {concurrency} concurrent trials" if concurrency > 1 else "wall"
    return f"{e.device}: {_hours(e.seconds)} of trial time ({wall}; {_kind(e)}: {e.source})"


def _missing(e: Estimate) -> str:
    where = WHERE[e.device]
    if e.pack > 1:
        hint = PACK_HINT.format(where=where, table=TABLE_NAME, size=e.pack)
        return f"no seconds per pack-epoch for packs of {e.pack} or more members of this config on {where}: {hint}"
    hint = MEASURE_HINT.format(where=where, table=TABLE_NAME)
    return f"no measured seconds per epoch for this config on {where}: {hint}"


def _kind(e: Estimate) -> str:
    return "estimated" if e.estimated else "measured"


def describe_cost(plan: StudyPlan) -> str:
    """The plan's cost lines: trial-epochs per stage, then the estimated time on each device."""
    epochs = stage_epochs(plan)
    rows = f" on {plan.train_rows} training rows" if plan.train_rows else ""
    lines = [f"Cost: {epochs.total} trial-epochs ({epochs.pretrain} pretraining + {epochs.finetune} finetuning){rows}"]
    lines += describe_pack_cost(plan, epochs.total)
    if plan.spec.resources.pack > 1:
        packed = stage_pack_epochs(plan)
        lines.append(f"  pack-epochs: at most {packed.total} ({packed.pretrain} pretraining + {packed.finetune} "
                     "finetuning; every stage's packs: searches, LR extension rounds, candidates, re-runs), each "
                     "priced as one pack's epoch")
    lines += ["  " + describe_estimate(estimate(plan, device), plan.concurrency) for device in DEVICES]
    return "\n".join(lines)


def describe_total(plans: list[StudyPlan]) -> str:
    """A campaign's total: trial-epochs, and the time on each device where every study's is known."""
    total = sum(stage_epochs(p).total for p in plans)
    lines = [f"Campaign cost: {total} trial-epochs over {len(plans)} studies"]
    for device in DEVICES:
        estimates = [estimate(p, device) for p in plans]
        found = [e.seconds for e in estimates]
        if all(s is not None for s in found):
            n = min(p.concurrency for p in plans)
            packed = any(e.pack > 1 for e in estimates)  # packs' time is not divided by those running at once
            wall = f" ({_hours(sum(found) / n)} wall at {n} concurrent trials)" if n > 1 and not packed else ""
            guessed = sum(e.estimated for e in estimates)
            note = f"; {guessed} of {len(plans)} studies from estimated seconds" if guessed else ""
            lines.append(f"  {device}: {_hours(sum(found))} of trial time{wall}{note}")
        else:
            known = sum(s is not None for s in found)
            hint = MEASURE_HINT.format(where=WHERE[device], table=TABLE_NAME)
            lines.append(f"  {device}: unknown ({len(found) - known} of {len(found)} studies have no measured "
                         f"seconds per epoch; {hint})")
    return "\n".join(lines)
