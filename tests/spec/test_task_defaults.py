"""Each task's defaults are the reference's settings (sptune.spec.task_defaults), equal to the table in
docs/reference_settings.md; a spec's own values win; the variants whose claim needs a shared position code
refuse a learned table."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sptune.errors import SpecError
from sptune.spec import load_spec
from sptune.spec.reading import from_dict
from sptune.spec.sections import ModelSpec, PretrainSpec, TrainingSpec
from sptune.spec.task_defaults import TASK_DEFAULTS

REPO = Path(__file__).resolve().parents[2]
TABLE = REPO / "docs" / "reference_settings.md"
SECTIONS = {"model": ModelSpec, "training": TrainingSpec, "pretrain": PretrainSpec}
SEARCH = {"lr": {"type": "grid", "values": [1.0e-3]}, "batch_size": {"type": "choice", "values": [32]}}


def _table() -> dict[tuple[str, str], object]:
    """(task, section.field) -> the "sptune default" column of the tested table."""
    rows = {}
    for line in TABLE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[1].startswith("`") and cells[1].strip("`").split(".")[0] in SECTIONS:
            rows[(cells[0], cells[1].strip("`"))] = yaml.safe_load(cells[4].strip("`"))
    return rows


def _default(task: str, parameter: str) -> object:
    section, field = parameter.split(".")
    return TASK_DEFAULTS.get(task, {}).get(section, {}).get(field, SECTIONS[section].model_fields[field].default)


def test_the_documented_table_is_the_code():
    table = _table()
    assert len(table) >= 70
    for (task, parameter), documented in table.items():
        assert _default(task, parameter) == documented, (task, parameter)
    for task, sections in TASK_DEFAULTS.items():  # and nothing in the code that the table does not show
        for section, values in sections.items():
            assert {(task, f"{section}.{f}") for f in values} <= set(table), task


def _spec(task: str, **sections) -> dict:
    return {"name": "t", "task": {"name": task}, "pretrain": {"epochs": 2, "search": SEARCH},
            "variants": {"scratch": {"search": SEARCH}, "spt": {"search": SEARCH}}, **sections}


def test_a_spec_takes_its_tasks_defaults_beneath_what_it_writes():
    spec = from_dict(_spec("image", model={"n_layers": 1, "dropout": 0.1}))
    assert (spec.model.n_layers, spec.model.dropout, spec.model.d_model) == (1, 0.1, 64)  # written, written, task's
    assert (spec.model.positions, spec.training.schedule, spec.training.grad_clip) == ("sinusoidal", "constant", 0.0)
    assert (spec.training.warmup_steps, spec.pretrain.warmup_steps, spec.pretrain.loss) == (2000, 2500, "l1")
    # A written warm-up fraction keeps the task's warm-ups in steps out: the spec chose a fraction.
    fraction = from_dict(_spec("image", training={"warmup_fraction": 0.2}))
    assert (fraction.training.warmup_steps, fraction.pretrain.warmup_steps) == (None, None)
    # A task without defaults keeps the sections' own.
    assert from_dict(_spec("bit_xor")).model.positions == ModelSpec.model_fields["positions"].default


@pytest.mark.parametrize("kind", ["qk_init", "frozen_attn", "frozen_attn_mlp"])
def test_variants_defined_on_attention_refuse_a_learned_table(kind):
    data = _spec("image", model={"positions": "learned"})
    data["variants"][kind] = {"search": SEARCH}
    with pytest.raises(SpecError) as caught:
        from_dict(data)
    assert caught.value.where == "model.positions" and "sinusoidal" in str(caught.value), str(caught.value)
    for shared in ("sinusoidal", "rotary"):
        from_dict({**data, "model": {"positions": shared}})


def test_every_shipped_spec_still_loads():
    for path in sorted((REPO / "search_spaces").glob("*.yaml")):
        load_spec(path)
