"""YAML files that are plainly not a sweep spec or a campaign, named for what they are: the sweeps folder ships a
Ray cluster launcher file beside the campaigns, and pydantic's answer to one ("name: Field required") would send
its reader looking for a missing key instead of the right command."""

from __future__ import annotations

from typing import Any

from sptune.errors import SpecError

_SPEC_FIX = "pass a sweep spec (e.g. search_spaces/digits_quick.yaml) or a campaign (e.g. sweeps/variants_mini.yaml)"

# (keys that together mark the kind, what the file is, the fix: {file} is the file's path).
KINDS: tuple[tuple[frozenset[str], str, str], ...] = (
    (
        frozenset({"cluster_name", "provider"}),
        "this is a Ray cluster launcher file for `ray up`, not a sweep spec",
        "start the cluster with `ray up {file}`, then send it a spec: `python -m sptune.jobs submit "
        "search_spaces/digits_quick.yaml --address http://127.0.0.1:8265 --output /ABSOLUTE/PATH` "
        "(docs/cluster.md), or run a spec here with `python -m sptune.sweep search_spaces/digits_quick.yaml`",
    ),
    (frozenset({"apiVersion", "kind"}), "this is a Kubernetes manifest, not a sweep spec", _SPEC_FIX),
    (frozenset({"services"}), "this is a Docker Compose file, not a sweep spec", _SPEC_FIX),
    (frozenset({"scrape_configs"}), "this is a Prometheus configuration, not a sweep spec", _SPEC_FIX),
    (frozenset({"channels", "dependencies"}), "this is a conda environment file, not a sweep spec", _SPEC_FIX),
)


def refuse_other_kinds(where: str, data: dict[str, Any], spec_keys: set[str]) -> None:
    """SpecError when ``data`` (a YAML file's top-level mapping) has none of ``spec_keys`` (a spec's and a
    campaign's top-level keys): naming its kind where the keys show one, else listing the keys it has instead."""
    keys = {str(key) for key in data}
    if keys & spec_keys:
        return
    for marks, kind, fix in KINDS:
        if marks <= keys:
            raise SpecError(where, kind, fix.format(file=where))
    shown = ", ".join(sorted(keys)[:6]) + (", ..." if len(keys) > 6 else "")
    raise SpecError(
        where,
        f"not a sweep spec or a campaign: none of its top-level keys ({shown or 'none'}) is a spec's (name, task, "
        "model, pretrain, finetune, variants, ...) or a campaign's (campaign, studies)",
        _SPEC_FIX,
    )
