"""What a planned study costs: its trial-epochs per stage times measured seconds per epoch.

The seconds come from `epoch_seconds.yaml` (beside this module): measurements per task config and
device, each with where it came from. A config or device without one is "unknown", never guessed; an
entry marked ``estimate: true`` is arithmetic, not a measurement, and is printed as "estimated".
An epoch's time is linear in the training rows (docs/design/plan.md), so a measurement taken on another
number of rows is scaled to the plan's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from sptune.plan.packs import describe_pack_cost
from sptune.plan.selection_steps import selection_epochs
from sptune.plan.study_plan import SearchPlan, StudyPlan, search_epochs

TABLE = Path(__file__).with_name("epoch_seconds.yaml")
DEVICES = ("cpu", "gpu")


@dataclass(frozen=True)
class StageEpochs:
    """The most trial-epochs a study spends, split by what one epoch costs: pretraining and finetuning
    (their sum is the plan's "at most N trial-epochs")."""

    pretrain: int
    finetune: int

    @property
    def total(self) -> int:
        return self.pretrain + self.finetune


@dataclass(frozen=True)
class Estimate:
    device: str
    seconds: float | None  # trial-seconds (one trial at a time); None: no measurement for this config
    source: str = ""  # the measurement's name in epoch_seconds.yaml
    estimated: bool = False  # the entry is arithmetic (``estimate: true``), not a measurement


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


@cache
def measurements(path: Path = TABLE) -> tuple[dict[str, Any], ...]:
    return tuple(yaml.safe_load(path.read_text()) or [])


def config_of(plan: StudyPlan) -> dict[str, Any]:
    """What a measurement must match: the task, its sequence length and the model's shape."""
    m = plan.spec.model
    return {"task": plan.info.name, "seq_len": plan.info.seq_len, "d_model": m.d_model,
            "n_layers": m.n_layers, "n_heads": m.n_heads, "d_ff": m.d_ff}


def estimate(plan: StudyPlan, device: str, table: tuple[dict[str, Any], ...] | None = None) -> Estimate:
    """Trial-seconds of the plan on `device` from the first matching measurement, scaled to its rows."""
    config, epochs = config_of(plan), stage_epochs(plan)
    for entry in measurements() if table is None else table:
        if entry["device"] == device and entry["match"] == config:
            scale = (plan.train_rows or entry["train_rows"]) / entry["train_rows"]
            sec = entry["seconds"]
            total = (epochs.pretrain * sec.get("pretrain", sec["finetune"]) + epochs.finetune * sec["finetune"])
            return Estimate(device, total * scale, entry["name"], entry.get("estimate", False) is True)
    return Estimate(device, None)


def _hours(seconds: float) -> str:
    if seconds < 3600:  # a short study (one GPU call's): minutes, where 2 decimals of an hour are 36 s apart
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h" if seconds < 36_000 else f"{seconds / 3600:,.0f} h"


# How to fill a gap in the table, printed wherever a cost is unknown.
MEASURE_HINT = "measure one with `python tools/epoch_seconds.py --spec SPEC` on {where} and add it to {table}"
TABLE_NAME = TABLE.relative_to(TABLE.parents[2]).as_posix()  # as the user finds it: sptune/plan/...
WHERE = {"cpu": "a quiet CPU core", "gpu": "a GPU"}


def describe_estimate(e: Estimate, concurrency: int) -> str:
    if e.seconds is None:
        hint = MEASURE_HINT.format(where=WHERE[e.device], table=TABLE_NAME)
        return f"{e.device}: unknown (no measured seconds per epoch for this config on {WHERE[e.device]}: {hint})"
    wall = f"{_hours(e.seconds / concurrency)} wall at {concurrency} concurrent trials" if concurrency > 1 else "wall"
    return f"{e.device}: {_hours(e.seconds)} of trial time ({wall}; {_kind(e)}: {e.source})"


def _kind(e: Estimate) -> str:
    return "estimated" if e.estimated else "measured"


def describe_cost(plan: StudyPlan) -> str:
    """The plan's cost lines: trial-epochs per stage, then the estimated time on each device."""
    epochs = stage_epochs(plan)
    rows = f" on {plan.train_rows} training rows" if plan.train_rows else ""
    lines = [f"Cost: {epochs.total} trial-epochs ({epochs.pretrain} pretraining + {epochs.finetune} finetuning){rows}"]
    lines += describe_pack_cost(plan, epochs.total)
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
            wall = f" ({_hours(sum(found) / n)} wall at {n} concurrent trials)" if n > 1 else ""
            guessed = sum(e.estimated for e in estimates)
            note = f"; {guessed} of {len(plans)} studies from estimated seconds" if guessed else ""
            lines.append(f"  {device}: {_hours(sum(found))} of trial time{wall}{note}")
        else:
            known = sum(s is not None for s in found)
            hint = MEASURE_HINT.format(where=WHERE[device], table=TABLE_NAME)
            lines.append(f"  {device}: unknown ({len(found) - known} of {len(found)} studies have no measured "
                         f"seconds per epoch; {hint})")
    return "\n".join(lines)
