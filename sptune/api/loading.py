"""`load_results(DIR)`: a finished study (or campaign) read from its output folder into `sptune.api.study_result`'s
values.

Everything comes from the files the study wrote (results.json, the contract; flags.json, the report's fairness
flags; optuna.json; spec.yaml), so `sptune.run` and `load_results` of the same folder give equal objects. Reading
imports no Ray, MLflow or torch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from sptune.api.study_result import (
    CampaignResult,
    Delta,
    Flag,
    MlflowRuns,
    OptunaStudies,
    Pick,
    SeedResult,
    Sequential,
    StudyFiles,
    StudyResult,
    VariantResult,
)
from sptune.errors import DataError
from sptune.judging.stats import Summary
from sptune.output_files import FLAGS_JSON, OPTUNA_DB, OPTUNA_RECORD, REPORT_HTML, RESULTS_JSON, RESULTS_MD, SPEC
from sptune.spec import bounded_yaml


def load_results(output_dir: str | Path) -> StudyResult | CampaignResult:
    """The finished study (or campaign) in `output_dir`, the folder `python -m sptune.sweep --output` or
    `sptune.run(output=...)` wrote. Raises DataError when it holds no readable results.json."""
    out = Path(output_dir).expanduser().resolve()
    doc = _read_json(out / RESULTS_JSON)
    if "campaign" in doc:
        return _campaign(out, doc)
    return study_result(out, doc)


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise DataError(
            str(path),
            "no results.json here: the folder holds no finished study",
            "pass the --output folder of a study that ran to the end (or resume it first)",
        )
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise DataError(str(path), f"cannot be read as JSON ({err})", "point at a finished study's folder") from None
    if not isinstance(doc, dict) or "rows" not in doc:
        raise DataError(str(path), "is not a study's results (no 'rows')", "point at a finished study's folder")
    return doc


def _campaign(root: Path, doc: dict[str, Any]) -> CampaignResult:
    studies = []
    for name, part in doc.get("studies", {}).items():
        rows = [r for r in doc["rows"] if r.get("study") == name]
        studies.append(study_result(root / name, {**part, "rows": rows}))
    return CampaignResult(doc["campaign"], tuple(studies), root / RESULTS_JSON)


def study_result(out: Path, doc: Mapping[str, Any]) -> StudyResult:
    """One study's result from its results.json document and the other files of its folder `out`."""
    spec = _spec(out)
    summary = doc.get("summary") or {}
    rows_by: dict[str, list[Mapping[str, Any]]] = {}
    for row in doc["rows"]:
        rows_by.setdefault(row["variant"], []).append(row)
    names = list(dict.fromkeys([*summary, *rows_by]))
    picks = doc.get("picks") or {}
    reran = bool((doc.get("seeds") or {}).get("rerun"))
    variants = tuple(_variant(n, summary.get(n, {}), rows_by.get(n, []), picks.get(n), reran) for n in names)
    mlflow = doc.get("mlflow") or {}
    tracking = spec.get("tracking") or {}
    experiment = tracking.get("experiment") or (f"sptune-{spec['name']}" if spec.get("name") else None)
    return StudyResult(
        name=doc.get("study", out.name),
        task=doc.get("task", ""),
        baseline=doc.get("baseline", "baseline"),
        variants=variants,
        flags=_flags(out),
        mlflow=MlflowRuns(
            mlflow.get("tracking_uri"), mlflow.get("experiment_id"), experiment, mlflow.get("parent_run_id")
        ),
        optuna=_optuna(out),
        files=StudyFiles(
            out,
            out / RESULTS_JSON,
            _existing(out / RESULTS_MD),
            _existing(out / REPORT_HTML),
            _existing(out / FLAGS_JSON),
            _existing(out / SPEC),
        ),
        document=doc,
    )


def _existing(path: Path) -> Path | None:
    return path if path.exists() else None


def _spec(out: Path) -> dict[str, Any]:
    # A study folder may come from someone else: its spec.yaml is read within the spec reader's bounds, so an alias
    # bomb in it is refused at once rather than walked (the experiment's name is then left unknown).
    try:
        spec = bounded_yaml.safe_load((out / SPEC).read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return {}
    return spec if isinstance(spec, dict) else {}


def _variant(
    name: str, entry: Mapping[str, Any], rows: list[Mapping[str, Any]], pick: Mapping[str, Any] | None, reran: bool
) -> VariantResult:
    seeds = tuple(_seed(r) for r in rows)
    delta = None
    if entry.get("delta_vs"):
        delta = Delta(
            entry["delta_vs"],
            Summary.from_fields(entry, "delta"),
            Summary.from_fields(entry, "train_delta"),
            bool(entry.get("delta_like_for_like")),
            entry.get("delta_pairing") or "",
        )
    return VariantResult(
        name=name,
        kind=str(rows[0]["kind"]) if rows else name,
        pick=_pick(pick, rows, reran),
        seeds=seeds,
        test_acc=Summary.from_fields(entry, "test_acc"),
        val_acc_mean=entry.get("val_acc_mean"),
        train_acc_mean=entry.get("train_acc_mean"),
        seeds_not_used=tuple(entry.get("seeds_not_used") or ()),
        delta=delta,
        sequential=_sequential(entry.get("sequential")),
    )


def _pick(pick: Mapping[str, Any] | None, rows: list[Mapping[str, Any]], reran: bool) -> Pick:
    if pick is not None:
        return Pick(dict(pick["config"]), pick["trial_id"], pick["stage"], pick["epoch"], pick["score"])
    config = {"lr": rows[0]["lr"], "batch_size": rows[0]["batch_size"]} if rows else {}
    if reran or len(rows) != 1:  # the rows are re-runs of the pick: its own trial is not in an older results.json
        return Pick(config, None, None, None, None)
    row = rows[0]  # no re-runs: the one row is the pick, tested
    return Pick(config, row["trial_id"], None, row["best_epoch"], row["val_acc"])


def _seed(row: Mapping[str, Any]) -> SeedResult:
    return SeedResult(
        seed=int(row["seed"]),
        test_acc=row["test_acc"],
        val_acc=row["val_acc"],
        train_acc=row.get("train_acc"),
        test_loss=row["test_loss"],
        lr=row["lr"],
        batch_size=row["batch_size"],
        best_epoch=row["best_epoch"],
        trial_id=row["trial_id"],
        checkpoint=row["checkpoint"],
        mlflow_run_id=row.get("mlflow_run_id"),
        delta_test=row.get("delta_test_vs_baseline"),
        delta_vs=row.get("delta_baseline"),
        may_be_unconverged=bool(row.get("may_be_unconverged")),
    )


def _pair(values: list[float] | None) -> tuple[float, float] | None:
    return (values[0], values[1]) if values else None


def _sequential(c: Mapping[str, Any] | None) -> Sequential | None:
    if not c:
        return None
    test, stop = c["test"], c["stopped"]
    return Sequential(
        c["vs"],
        c["verdict"],
        c["seeds_used"],
        c["max_seeds"],
        stop["look"],
        stop["verdict"],
        test.get("mean"),
        _pair(test.get("interval")),
        _pair(test.get("t_interval")),
        test.get("boundary"),
        c.get("fixed_n"),
    )


def _flags(out: Path) -> tuple[Flag, ...] | None:
    path = out / FLAGS_JSON
    if not path.is_file():
        return None
    return tuple(
        Flag(f["key"], f["level"], f["title"], f["summary"], tuple(f.get("items") or ()))
        for f in json.loads(path.read_text())
    )


def _optuna(out: Path) -> OptunaStudies | None:
    """optuna.json's record (`sptune.tracking.optuna_studies`, read here without importing Optuna)."""
    path = out / OPTUNA_RECORD
    if not path.is_file():
        return None
    record = json.loads(path.read_text())
    if not record.get("studies"):
        return None
    storage = record.get("storage") or f"sqlite:///{out / OPTUNA_DB}"
    return OptunaStudies(storage, dict(record["studies"]))
