"""Campaigns: several studies (specs x override grids) run as one (`sptune.study.publish` merges their results).

campaign: variants_mini
studies:
  - spec: ../search_spaces/variants_digits.yaml   # relative to this file
    name: digits                                   # output subdirectory (default: spec name)
    set: {pretrain.epochs: 5}                      # overrides for this study
    axes: {model.n_layers: [1, 2]}                 # ablation grid: one study per combination
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sptune.errors import SpecError
from sptune.rules.budgets import TOTAL_MATCHED
from sptune.spec.names import FIX as NAME_FIX
from sptune.spec.names import folder_name_problem

STUDY_KEYS = {"spec", "name", "set", "axes", "compute_matched"}


@dataclass(frozen=True)
class CampaignStudy:
    name: str
    spec_path: Path
    overrides: tuple[str, ...]


def is_campaign(data: dict[str, Any]) -> bool:
    return "campaign" in data


def assignments(mapping: Mapping[str, Any]) -> list[str]:
    """`--set` assignments (KEY.PATH=VALUE, the value as flow YAML) of a mapping of field paths to values."""
    return [
        f"{k}={yaml.safe_dump(v, default_flow_style=True).strip().removesuffix('...').strip()}"
        for k, v in mapping.items()
    ]


def _axis_suffix(combo: dict[str, Any]) -> str:
    parts = []
    for key, value in combo.items():
        parts.append(f"spt{value[0]}-ft{value[1]}" if key == COMPUTE_KEY else f"{key.split('.')[-1]}{value}")
    return "-".join(parts)


COMPUTE_KEY = "_compute_split"


def _compute_matched(setting: Any, where: str) -> dict[str, list]:
    """{total_epochs: T, spt_fractions: [f, ...]} -> one study per split of T epochs into
    round(f*T) SPT epochs and the rest finetuning, under budget: total_matched, so that variants
    not starting from SPT (scratch) train all T epochs: the same total in every study and variant."""
    if setting is None:
        return {}
    if not isinstance(setting, dict) or set(setting) != {"total_epochs", "spt_fractions"}:
        raise SpecError(
            f"{where}.compute_matched",
            "expected {total_epochs: T, spt_fractions: [...]}",
            "e.g. compute_matched: {total_epochs: 20, spt_fractions: [0, 0.25, 0.5]}",
        )
    total, fractions = setting["total_epochs"], setting["spt_fractions"]
    if not isinstance(total, int) or total < 2 or not fractions or any(not 0 <= f < 1 for f in fractions):
        raise SpecError(
            f"{where}.compute_matched",
            "total_epochs must be an integer >= 2 and each fraction in [0, 1)",
            "e.g. total_epochs: 20, spt_fractions: [0, 0.25, 0.5]",
        )
    return {COMPUTE_KEY: [(round(f * total), total - round(f * total)) for f in fractions]}


def _expand_combo(combo: dict[str, Any]) -> dict[str, Any]:
    split = combo.pop(COMPUTE_KEY, None)
    if split is not None:
        combo = {**combo, "pretrain.epochs": split[0], "finetune.epochs": split[1], "budget": TOTAL_MATCHED}
    return combo


def _check_name(where: str, name: object) -> None:
    # Both become output folders: the campaign's, and each study's inside it.
    found = folder_name_problem(name)
    if found:
        raise SpecError(where, found, NAME_FIX)


def expand(data: dict[str, Any], campaign_file: Path) -> list[CampaignStudy]:
    unknown = set(data) - {"campaign", "studies"}
    if unknown:
        raise SpecError(sorted(unknown)[0], "unknown key in a campaign file", "use only campaign: and studies:")
    _check_name("campaign", data.get("campaign"))
    studies = data.get("studies")
    if not isinstance(studies, list) or not studies:
        raise SpecError("studies", "a campaign needs a non-empty list of studies", "add - spec: path/to/spec.yaml")
    out: list[CampaignStudy] = []
    for i, entry in enumerate(studies):
        where = f"studies[{i}]"
        if not isinstance(entry, dict) or "spec" not in entry:
            raise SpecError(where, "each study needs a 'spec' path", "e.g. - spec: ../search_spaces/digits_quick.yaml")
        extra = set(entry) - STUDY_KEYS
        if extra:
            raise SpecError(f"{where}.{sorted(extra)[0]}", "unknown key", f"use {', '.join(sorted(STUDY_KEYS))}")
        spec_path = (campaign_file.parent / entry["spec"]).resolve()
        base = assignments(entry.get("set") or {})
        axes = {**(entry.get("axes") or {}), **_compute_matched(entry.get("compute_matched"), where)}
        if not isinstance(axes, dict) or any(not isinstance(v, list) or not v for v in axes.values()):
            raise SpecError(f"{where}.axes", "axes map a field path to a non-empty list", "e.g. model.n_layers: [1, 2]")
        name = entry.get("name") or spec_path.stem
        _check_name(f"{where}.name", name)
        for values in itertools.product(*axes.values()) if axes else [()]:
            combo = dict(zip(axes, values, strict=True))
            suffix = _axis_suffix(combo)
            combo = _expand_combo(combo)
            out.append(
                CampaignStudy(f"{name}-{suffix}" if suffix else name, spec_path, tuple(base + assignments(combo)))
            )
    names = [s.name for s in out]
    if len(set(names)) != len(names):
        raise SpecError("studies", "two studies would write to the same output directory", "give each a name:")
    return out
