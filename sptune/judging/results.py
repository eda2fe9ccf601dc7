"""results.json (the contract other tools read) and results.md (its only writer); the statistics are
``sptune.judging.stats``, shared with the report."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sptune.judging import stats
from sptune.judging.budget_report import budget_table
from sptune.judging.convergence import UNCONVERGED_TEXT
from sptune.judging.expected_max import table_budgets
from sptune.judging.extension_results import extension_lines
from sptune.judging.pairing import PAIRING_RULE, Pairing, pairing_label, pairings
from sptune.judging.robust_selection import candidate_lines
from sptune.judging.sequential_results import sequential_lines
from sptune.judging.stats import DEFAULT_BASELINE, Summary
from sptune.judging.trivial_check import trivial_lines
from sptune.output_files import RESULTS_JSON, RESULTS_MD
from sptune.rules.seeds import SPREAD_TEXT

DELTA_COLUMN = "delta_test_vs_baseline"
EXPECTED_MAX_SCORE = ("best validation accuracy of each search trial (a trial stopped early by halving at the score "
                      "it reached; trials without a score are left out)")
COLUMNS = (
    "variant",
    "seed",
    "lr",
    "batch_size",
    "best_epoch",
    "val_acc",
    "train_acc",
    "test_acc",
    DELTA_COLUMN,
    "delta_baseline",
    "trials",
)


@dataclass
class ResultRow:
    """One selected checkpoint tested once: a row of results.json (its keys are these field names)."""

    variant: str
    kind: str
    task: str
    seed: int
    lr: float
    batch_size: int
    best_epoch: int
    val_acc: float
    test_acc: float
    test_loss: float
    # The variant's LR/batch search, shared by all its seeds' rows.
    trials: int
    diverged: int
    failed: int
    trial_epochs: int
    trial_id: str
    mlflow_run_id: str | None
    checkpoint: str
    delta_test_vs_baseline: float | None = None
    # The variant that Δ is against (sptune.judging.pairing: the baseline, or the like-for-like one).
    delta_baseline: str | None = None
    # Failures Tune counted in the variant's search (crashed trial processes, lost nodes), each retried from
    # the trial's last checkpoint; a trial that ran out of retries is also in `failed`.
    failures: int = 0
    # Where the test split was evaluated: the device ("cpu" if the trial's GPU is not on the driver) and the
    # precision its trial trained with (sptune.training.final_scores).
    test_device: str | None = None
    test_precision: str | None = None
    # The selected epoch is in the last 10 % of its budget (sptune.judging.convergence.may_be_unconverged).
    may_be_unconverged: bool = False
    # The training accuracy of the selected epoch (its running mean over the epoch's batches, dropout on): beside
    # test_acc it separates "did not fit the training data" from "did not generalise". None in older results.
    train_acc: float | None = None


def _pairings(rows: list[ResultRow], baseline: str, pretrain_objective: str | None) -> dict[str, Pairing]:
    return pairings({r.variant: r.kind for r in rows}, baseline, pretrain_objective)


def add_deltas(rows: list[ResultRow], baseline: str = DEFAULT_BASELINE, pretrain_objective: str | None = None) -> None:
    """Per row: Δ test accuracy vs its paired variant's run with the same seed (``sptune.judging.pairing``), and that
    variant's name; None for the baseline's own rows, and when the paired variant has no run with that seed
    (or no variant is named ``baseline``). ``pretrain_objective``: the spec's, which `spt` follows."""
    paired = _pairings(rows, baseline, pretrain_objective)
    acc = {(r.variant, r.seed): r.test_acc for r in rows}
    for r in rows:
        pair = paired.get(r.variant)
        base_acc = acc.get((pair.baseline, r.seed)) if pair else None
        r.delta_test_vs_baseline = None if base_acc is None else r.test_acc - base_acc
        r.delta_baseline = None if base_acc is None else pair.baseline


def _by_variant(rows: list[ResultRow]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(r.variant, []).append(asdict(r))
    return out


def _attempts(variant: str, test: dict[str, float], attempted: Mapping[str, Sequence[int]] | None) -> dict[str, Any]:
    """How many seeds the variant was tested with (``n_attempted``: its re-runs, or its search's pick) and how
    many gave a usable test accuracy (``n_used``); ``seeds_not_used``: those that diverged or failed."""
    tried = [str(seed) for seed in attempted[variant]] if attempted and variant in attempted else list(test)
    return {"n_attempted": len(tried), "n_used": len(test), "seeds_not_used": [s for s in tried if s not in test]}


def summarize(rows: list[ResultRow], baseline: str = DEFAULT_BASELINE, pretrain_objective: str | None = None,
              attempted: Mapping[str, Sequence[int]] | None = None) -> dict[str, dict[str, Any]]:
    """Per variant: test accuracy over seeds (``test_acc_mean``, ``_std``, ``_ci95``, ``_ci_method``, ``_n``),
    the seeds tried and used (``attempted``: variant -> the seeds it was tested with; without it, those with a
    row), the mean validation accuracy, and, except for the baseline itself, Δ test (``delta_*``, with the
    seeds it pairs in ``delta_seeds``) vs its paired variant (``delta_vs``; ``delta_like_for_like`` and
    ``delta_pairing`` say whether both train the same model)."""
    groups = _by_variant(rows)
    paired = _pairings(rows, baseline, pretrain_objective)
    summary: dict[str, dict[str, Any]] = {}
    for variant, mine in groups.items():
        test = stats.values_by_seed(mine, "test_acc")
        val = stats.summarize(list(stats.values_by_seed(mine, "val_acc").values()))
        train = stats.summarize([r["train_acc"] for r in mine if r.get("train_acc") is not None])
        entry = {"seeds": len(mine), **_attempts(variant, test, attempted),
                 **_fields("test_acc", stats.summarize(list(test.values()))),
                 "val_acc_mean": val.mean if val else None, "train_acc_mean": train.mean if train else None}
        if variant in paired:
            pair = paired[variant]
            entry.update(delta_vs=pair.baseline, delta_like_for_like=pair.like_for_like, delta_pairing=pair.note)
            entry.update(_fields("delta", stats.paired_delta(test, stats.values_by_seed(groups[pair.baseline],
                                                                                        "test_acc"))))
        summary[variant] = entry
    return with_train_deltas(summary, [r for mine in groups.values() for r in mine])


TRAIN_DELTA_RULE = ("Δ train: the selected checkpoints' train accuracy (eval mode) minus that of the variant Δ test "
                    "is against, paired by seed, with its 95 % t-interval: whether a variant fits its training rows "
                    "better (Coser & Orvieto's Table 5) is a difference with an interval too.")


def with_train_deltas(summary: Mapping[str, dict[str, Any]], rows: Sequence[Mapping[str, Any]]
                      ) -> dict[str, dict[str, Any]]:
    """A copy of ``summary`` in which each variant with a Δ test has its Δ train accuracy (``train_delta_*``)
    against the same variant, paired by seed, from ``rows`` (results.json's); entries that have one are kept."""
    by_variant: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        by_variant.setdefault(r["variant"], []).append(r)
    out = {}
    for variant, entry in summary.items():
        out[variant] = dict(entry)
        base = entry.get("delta_vs")
        if base is None or "train_delta_mean" in entry:
            continue
        delta = stats.paired_delta(stats.values_by_seed(by_variant.get(variant, []), "train_acc"),
                                   stats.values_by_seed(by_variant.get(base, []), "train_acc"))
        out[variant].update(_fields("train_delta", delta))
    return out


def _fields(prefix: str, s: Summary | None) -> dict[str, Any]:
    return s.to_fields(prefix) if s else {f"{prefix}_mean": None}


def _fraction(x: float) -> str:
    return f"{x:.4f}"


def _signed(x: float) -> str:
    return f"{x:+.4f}"


def _delta_cell(entry: dict[str, Any], baseline: str, variant: str) -> str:
    delta = Summary.from_fields(entry, "delta")
    if delta is None:
        return "baseline" if variant == baseline else "-"
    return f"{_signed(delta.mean)} {stats.interval_text(delta, _signed)}"


def _train_delta_cell(entry: dict[str, Any]) -> str:
    delta = Summary.from_fields(entry, "train_delta")
    if delta is None:
        return "-"
    if delta.interval is None:
        return _signed(delta.mean)
    mark = stats.CLIPPED_MARK if delta.clipped else ""
    return f"{_signed(delta.mean)} [{_signed(delta.interval[0])}, {_signed(delta.interval[1])}]{mark}"


def _against_cell(entry: dict[str, Any]) -> str:
    # e.g. "scratch_causal (like-for-like: both causal)": which variant the Δ is against, and whether it is fair.
    return pairing_label(entry["delta_vs"], entry.get("delta_pairing") or "") if "delta_vs" in entry else "-"


def summary_table(summary: dict[str, dict[str, Any]], baseline: str = DEFAULT_BASELINE) -> str:
    """Per variant: mean ± std, the 95 % interval (saying which, with n), Δ test and the variant it is against;
    then the rules."""
    lines = ["| variant | seeds used / tried | test acc mean ± std | 95 % interval of the mean | Δ test | Δ vs "
             "| train acc (selected checkpoints, eval mode) | Δ train |", "|---|---|---|---|---|---|---|---|"]
    for variant, entry in summary.items():
        test = Summary.from_fields(entry, "test_acc")
        spread = "-" if test is None else _fraction(test.mean) + (f" ± {test.std:.4f}" if test.std is not None else "")
        interval = "-" if test is None else stats.interval_text(test, _fraction)
        lines.append(f"| {variant} | {_seeds_cell(entry)} | {spread} | {interval} | "
                     f"{_delta_cell(entry, baseline, variant)} | {_against_cell(entry)} | "
                     f"{_cell('train_acc', entry.get('train_acc_mean'))} | {_train_delta_cell(entry)} |")
    rules = [stats.INTERVAL_RULE, stats.delta_rule(summary, baseline), PAIRING_RULE, TRAIN_DELTA_RULE]
    return "\n".join(lines + ["", *_unused_seed_lines(summary), *rules])


def _seeds_cell(entry: dict[str, Any]) -> str:
    used, tried = entry.get("n_used", entry["seeds"]), entry.get("n_attempted", entry["seeds"])
    return f"{used} / {tried}"


def _unused_seed_lines(summary: dict[str, dict[str, Any]]) -> list[str]:
    """A line per variant some of whose seeds diverged or failed: its mean and Δ are over the others only."""
    lines = []
    for variant, entry in summary.items():
        unused = entry.get("seeds_not_used") or []
        if unused:
            lines.append(f"{variant}: seed(s) {', '.join(unused)} diverged or failed and are not in its mean, "
                         f"interval or Δ ({entry['n_used']} of {entry['n_attempted']} used).")
    return lines + ([""] if lines else [])


def _cell(key: str, value: Any) -> str:
    if value is None:
        return "-"
    if key == "lr":
        return f"{value:.3g}"
    if key == DELTA_COLUMN:
        return _signed(value)
    if isinstance(value, float):
        return _fraction(value)
    return str(value)


def _row_cell(row: ResultRow, key: str) -> str:
    text = _cell(key, getattr(row, key))
    return text + " ⚠" if key == "best_epoch" and row.may_be_unconverged else text


def unconverged_note(rows: list[ResultRow]) -> list[str]:
    """results.md's line under the rows when a selected epoch is in the last 10 % of its budget."""
    marked = [f"{r.variant} seed {r.seed} (epoch {r.best_epoch})" for r in rows if r.may_be_unconverged]
    return ["", f"⚠ {UNCONVERGED_TEXT}: {', '.join(marked)}."] if marked else []


def markdown_table(rows: list[ResultRow]) -> str:
    head = "| " + " | ".join(COLUMNS) + " |"
    sep = "|" + "|".join("---" for _ in COLUMNS) + "|"
    body = ["| " + " | ".join(_row_cell(r, c) for c in COLUMNS) + " |" for r in rows]
    return "\n".join([head, sep, *body, *unconverged_note(rows)])


def write_results(output_dir: Path, study: dict[str, Any], rows: list[ResultRow],
                  baseline: str = DEFAULT_BASELINE) -> tuple[Path, Path]:
    """results.json ({**study, baseline, rows}) and results.md; ``study["summary"]`` from ``summarize`` with the
    same ``baseline``. The report reads the baseline back from results.json."""
    json_path = output_dir / RESULTS_JSON
    document = {**study, "baseline": baseline, "rows": [asdict(r) for r in rows]}
    json_path.write_text(json.dumps(document, indent=2, default=str))
    md_path = output_dir / RESULTS_MD
    md = [
        f"# {study['study']} — task {study['task']}",
        "",
        markdown_table(rows),
        "",
        summary_table(study["summary"], baseline),
        *sequential_lines(study.get("sequential")),
        "",
        *([budget_table(study["budget"]), ""] if "budget" in study else []),
        *([SPREAD_TEXT[study["spread"]], ""] if study.get("spread") in SPREAD_TEXT else []),
        "Selected on validation accuracy (best trial and epoch per variant); test read once per selected checkpoint.",
        *trivial_lines(study),
        *extension_lines(study.get("lr_extension")),
        *candidate_lines(study.get("candidates")),
        *expected_max_lines(study.get("expected_max")),
        *reread_lines(study.get("test_reads")),
        *provenance_lines(study.get("provenance")),
    ]
    md_path.write_text("\n".join(md) + "\n")
    return json_path, md_path


def reread_lines(reads: dict[str, int] | None) -> list[str]:
    """results.md's account of the test reads (results.json's ``test_reads``): a checkpoint read more than
    once (a resume after a kill inside the final evaluation reads it again) is named with its count."""
    if not reads:
        return []
    again = {checkpoint: n for checkpoint, n in reads.items() if n > 1}
    lines = ["", f"Test split reads: {sum(reads.values())} for {len(reads)} checkpoint(s)"
                 + ("." if not again else "; read more than once:")]
    lines += [f"- {checkpoint}: {n} reads (a resume re-read it after an interrupted final evaluation)"
              for checkpoint, n in again.items()]
    return lines


def provenance_lines(provenance: dict[str, Any] | None) -> list[str]:
    """One line of results.json's ``provenance``: commit, library versions, data fingerprints (short)."""
    if not provenance:
        return []
    git = provenance.get("git") or {}
    commit = f"commit {git['commit'][:12]}{' (uncommitted changes)' if git.get('dirty') else ''}" if git else \
        "no git checkout"
    versions = ", ".join(f"{k} {v}" for k, v in (provenance.get("versions") or {}).items())
    data = provenance.get("data") or {}
    prints = ", ".join(f"{split} {data[split][:12]}" for split in ("train", "val", "test") if data.get(split))
    return ["", f"Provenance: {commit}; {versions}; data sha256 {prints} (full values in results.json)."]


def expected_max_lines(doc: dict[str, Any] | None) -> list[str]:
    """results.md's compact table of results.json's ``expected_max``: the expected best validation accuracy of
    a search of n trials, at n = 1, 2, 4, ... and each variant's full budget, then where orders flip."""
    variants = (doc or {}).get("variants") or {}
    if not variants:
        return []
    names = list(variants)
    budgets = sorted({n for v in variants.values() for n in table_budgets(v["n_trials"])})
    lines = ["", "Expected best validation accuracy vs search budget (n of each variant's search trials; "
             "Tang et al. 2020's unbiased estimator of Dodge et al. 2019's curve):", "",
             "| trials | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for n in budgets:
        cells = [_fraction(v["by_n"][n - 1]) if n <= v["n_trials"] else "-" for v in variants.values()]
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return [*lines, "", *_flip_lines(doc)]


def _flip_lines(doc: dict[str, Any]) -> list[str]:
    order_vs, flips = doc.get("order_vs") or {}, doc.get("order_flips_at") or {}
    lines = [f"{v} vs {order_vs[v]}: the order flips at n = {', '.join(map(str, at))} trials."
             for v, at in flips.items() if at]
    if order_vs and not lines:
        lines.append("No variant's order vs the one its Δ is against flips within the trials run.")
    without = {v: k for v, k in (doc.get("trials_without_score") or {}).items() if k}
    if without:
        lines.append("Left out, no validation score: " + ", ".join(f"{v} {k}" for v, k in without.items()) + ".")
    return lines
