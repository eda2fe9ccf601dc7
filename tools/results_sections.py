"""What docs/results.md says of one collected study, every number read from its committed files: its commit and
data, its budget, how many seeds and what their spread covers, the smallest difference it could detect, whether
each selected LR is inside its searched range and each selected epoch before its budget's end.

`derived_values` lists the numbers the page computes from results.json rather than copies (wall time, the
smallest detectable Δ, a campaign's cross-study Δ): tools/results_trace.py accepts them beside the files' own."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from sptune.judging import stats
from sptune.judging.budget_report import budget_table
from sptune.judging.convergence import UNCONVERGED_TEXT
from sptune.judging.results import summary_table, with_train_deltas
from sptune.judging.sequential import FIXED_N_RULE
from sptune.judging.sequential_results import sequential_lines, stopped_text
from sptune.judging.stats import Summary
from sptune.judging.trivial_check import trivial_lines
from sptune.output_files import FIGURES, REPORT_MD, RESULTS_JSON, RESULTS_MD, SPEC
from sptune.report.flags import EDGE_FACTOR, edge_side
from sptune.report.formatting import fmt_lr
from sptune.report.lr_search import describe_space, lr_space, searched_space
from sptune.rules.seeds import NO_SPREAD, PRETRAIN_SPREAD, SPREAD_TEXT

LR_RULE = (f"Inside the searched range: the selected LR has searched LRs on both sides (not a grid end, not "
           f"within {EDGE_FACTOR:g}× of a range bound), the report's rule.")
EPOCH_RULE = f"Before the budget's end: no selected epoch {UNCONVERGED_TEXT}."
DIRTY_TEXT = "with uncommitted changes when it ran: these numbers are not re-derivable from that commit"
FLAG_HEADLINE = re.compile(r"^- (\*\*[A-Z]+: [^*]+\*\*)")


def members(folder: Path) -> list[tuple[str, Path, dict[str, Any]]]:
    """(name, directory, results.json) of a study, or of each study of a campaign, in run order."""
    results = json.loads((folder / RESULTS_JSON).read_text())
    if "campaign" not in results:
        return [(results.get("study", folder.name), folder, results)]
    return [(name, folder / name, json.loads((folder / name / RESULTS_JSON).read_text()))
            for name in results["studies"]]


def read_spec(directory: Path) -> dict[str, Any]:
    path = directory / SPEC
    return (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}


def wall_seconds(results: dict[str, Any]) -> float | None:
    """First stage released to last stage selected (the study's one Tuner), from results.json's timeline."""
    spans = [(float(t["start"]), float(t["end"])) for t in results.get("timeline") or [] if t.get("end")]
    return max(e for _, e in spans) - min(s for s, _ in spans) if spans else None


def minutes(seconds: float | None) -> str:
    return "not recorded" if seconds is None else f"{seconds / 60:.1f} min ({seconds:.0f} s)"


def provenance_lines(results: dict[str, Any], link: str) -> list[str]:
    """The commit the numbers came from (flagged when its tree had uncommitted changes), libraries, data, files."""
    provenance = results.get("provenance") or {}
    git = provenance.get("git") or {}
    if not git:
        commit = "**No commit recorded** (not run from a git checkout, or by code that predates provenance)"
    elif git.get("dirty"):
        commit = f"Commit `{git['commit'][:12]}` **{DIRTY_TEXT}**"
    else:
        commit = f"Commit `{git['commit'][:12]}` (clean working tree)"
    versions = ", ".join(f"{k} {v}" for k, v in (provenance.get("versions") or {}).items())
    data = provenance.get("data") or {}
    prints = ", ".join(f"{s} `{data[s][:12]}`" for s in ("train", "val", "test") if data.get(s))
    files = " · ".join(f"[{name}]({link}/{name})" for name in (SPEC, RESULTS_JSON, RESULTS_MD))
    return [f"{commit}; {versions or 'library versions not recorded'}; data sha256 {prints or 'not recorded'} "
            "(full values in results.json).", "", f"Files: {files}."]


def spread_line(results: dict[str, Any]) -> str:
    spread = results.get("spread")
    verdict = {PRETRAIN_SPREAD: "included", NO_SPREAD: "no spread"}.get(spread, "not included")
    text = SPREAD_TEXT.get(spread or "", "Spread over seeds: not recorded.")
    return f"Seeds: {text} Pretraining variance: **{verdict}**."


def power_table(summary: dict[str, dict[str, Any]]) -> list[str]:
    """Per variant with a Δ: its seeds, the paired Δs' spread and the smallest Δ the study could detect."""
    lines = ["| variant | seeds used / tried | Δ vs | seeds paired | std of the per-seed Δs | smallest detectable Δ |",
             "|---|---|---|---|---|---|"]
    for variant, entry in summary.items():
        used, tried = entry.get("n_used", entry.get("seeds")), entry.get("n_attempted", entry.get("seeds"))
        if "delta_vs" not in entry:
            lines.append(f"| {variant} | {used} / {tried} | - | - | - | - |")
            continue
        paired = bool(entry.get("delta_paired"))
        n, sd = entry.get("delta_n") or 0, entry.get("delta_std")
        mde = stats.min_detectable_effect(sd, n) if paired else None
        lines.append(f"| {variant} | {used} / {tried} | {entry['delta_vs']} | {n if paired else 'unpaired'} | "
                     f"{'-' if sd is None else f'{sd:.4f}'} | {'-' if mde is None else f'{mde:.4f}'} |")
    return lines + ["", stats.MDE_RULE]


def _lr_verdict(lrs: list[float], space: dict[str, Any] | None) -> str:
    if space is None:
        return "not searched (no search.lr)"
    if space.get("values") and len(space["values"]) == 1:
        return "fixed: one LR, not searched"
    sides = {edge[0] for edge in (edge_side(lr, space, []) for lr in lrs) if edge}
    if not sides:
        return "yes"
    return " and ".join(f"**no: at the {'top' if s == 'high' else 'bottom'} of the range**" for s in sorted(sides))


def _epochs(results: dict[str, Any], variant: str, rows: list[dict[str, Any]]) -> tuple[str, str, str]:
    """(the finetuning budget, the selected epochs, whether each is before the budget's end)."""
    entry = ((results.get("budget") or {}).get("variants") or {}).get(variant)
    if entry is None:
        marked = any(r.get("may_be_unconverged") for r in rows)
        return "not recorded", "/".join(str(r["best_epoch"]) for r in rows), "**no**" if marked else "yes"
    fine = entry["finetune"]
    budget = f"{fine['epochs']:g} epochs" if fine["unit"] == "epochs" else f"{fine['optimizer_steps']} steps"
    if fine.get("until_converged"):
        budget += f", until converged (at most {fine['until_converged']['max_epochs']} epochs)"
    chosen = "/".join(str(e) for e in entry.get("selected_epochs") or []) or "-"
    chosen += " (evaluation rounds)" if entry.get("selected_in") == "evaluation rounds" else ""
    return budget, chosen, "**no: may be unconverged**" if entry.get("may_be_unconverged") else "yes"


def selection_table(results: dict[str, Any], spec: dict[str, Any]) -> list[str]:
    """Per variant: its searched LRs, the selected one(s) and whether inside; its budget and selected epochs."""
    lines = ["| variant | LR searched | selected LR | inside the searched range | finetuning budget | "
             "selected epochs | before the budget's end |", "|---|---|---|---|---|---|---|"]
    for variant in results.get("summary") or {}:
        rows = [r for r in results.get("rows") or [] if r["variant"] == variant]
        lrs = list(dict.fromkeys(float(r["lr"]) for r in rows))
        space = lr_space(spec, variant)
        # As the report's edge flag: a range the variant's LR extension widened counts as searched.
        final = searched_space(space, (results.get("lr_extension") or {}).get(variant))
        searched = describe_space(space) if space else "-"
        if final != space:
            searched += f", extended to {describe_space(final)}"
        budget, chosen, before = _epochs(results, variant, rows)
        lines.append(f"| {variant} | {searched} | {', '.join(fmt_lr(x) for x in lrs) or '-'} | "
                     f"{_lr_verdict(lrs, final)} | {budget} | {chosen} | {before} |")
    return lines + ["", LR_RULE, EPOCH_RULE]


def flag_headlines(directory: Path) -> list[str]:
    """The report's fairness flags, headline only (their details, with the report's own numbers, are in it)."""
    path = directory / REPORT_MD
    if not path.is_file():
        return []
    lines, inside = [], False
    for line in path.read_text().splitlines():
        if line.startswith("## "):
            inside = line.strip() == "## Fairness flags"
        elif inside and FLAG_HEADLINE.match(line):
            lines.append(f"- {FLAG_HEADLINE.match(line).group(1)}")
    return lines


def member_lines(results: dict[str, Any], directory: Path, link: str) -> list[str]:
    """Everything the page says of one study, below its heading."""
    lines = [*provenance_lines(results, link), "",
             f"Wall time: {minutes(wall_seconds(results))}, first stage started to last stage selected "
             "(results.json timeline)." + (f" Report: [{REPORT_MD}]({link}/{REPORT_MD})."
                                            if (directory / REPORT_MD).is_file() else ""), "",
             stats_table(results), *sequential_lines(results.get("sequential")), *trivial_lines(results), ""]
    lines += [budget_table(results["budget"]), ""] if results.get("budget") else ["Budget: not recorded.", ""]
    lines += [spread_line(results), "", *power_table(results.get("summary") or {}), "",
              *selection_table(results, read_spec(directory)), ""]
    flags = flag_headlines(directory)
    if flags:
        lines += [f"Fairness flags ([the report]({link}/{REPORT_MD}) has their details):", "", *flags, ""]
    figure = directory / FIGURES / f"{results.get('task')}-lr.png"
    if figure.is_file():
        lines += [f"![accuracy vs learning rate, {results.get('study')}]({link}/figures/{figure.name})", ""]
    return lines


def sequential_verdicts(results: dict[str, Any]) -> str:
    """A claim row's account of a study run with sequential re-runs: each comparison's verdict and seeds used, e.g.
    'Sequential re-runs: spt vs scratch undecided, 15 of 15 seeds (stopped undecided at look 5 (15 seeds)).';
    "" for fixed re-runs."""
    comparisons = (results.get("sequential") or {}).get("comparisons") or {}
    said = [f"{v} vs {c['vs']} {c['verdict']}, {c['seeds_used']} of {c['max_seeds']} seeds (stopped {stopped_text(c)})"
            for v, c in comparisons.items()]
    return f"Sequential re-runs: {'; '.join(said)}." if said else ""


def summary_of(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """results.json's summary, with Δ train accuracy derived from its rows where a study ran before it was stored."""
    return with_train_deltas(results.get("summary") or {}, results.get("rows") or [])


def stats_table(results: dict[str, Any]) -> str:
    return summary_table(summary_of(results), results.get("baseline") or stats.DEFAULT_BASELINE)


def cross_study_rows(group: list[tuple[str, Path, dict[str, Any]]]) -> tuple[str, str, list[tuple]]:
    """A campaign's variants, Δ paired by seed with the baseline of their own study, or, in a study without
    it (e.g. an SPT-budget axis that trains scratch once), with the first member that has it:
    (baseline, that member, [(member, variant, seeds, test Summary, Δ Summary)])."""
    base = next(((n, r) for n, _, r in group if r.get("baseline") in r.get("summary", {})), None)
    if base is None:
        return "", "", []
    name, results = base
    baseline = results["baseline"]
    found = []
    for member, _, r in group:
        own = r if baseline in r.get("summary", {}) else results
        base_rows = stats.values_by_seed([x for x in own["rows"] if x["variant"] == baseline], "test_acc")
        for variant, entry in r.get("summary", {}).items():
            if variant != baseline:
                mine = stats.values_by_seed([x for x in r["rows"] if x["variant"] == variant], "test_acc")
                found.append((member, variant, entry["seeds"], stats.summarize(list(mine.values())),
                              stats.paired_delta(mine, base_rows)))
    return baseline, name, found


def rankings(group: list[tuple[str, Path, dict[str, Any]]]) -> list[tuple[str, list[str]]]:
    """(member, its variants from the highest mean test accuracy down) for each member with 2+ variants."""
    out = []
    for member, _, r in group:
        means = {v: e.get("test_acc_mean") for v, e in (r.get("summary") or {}).items()}
        if len(means) > 1 and all(m is not None for m in means.values()):
            out.append((member, sorted(means, key=lambda v: -means[v])))
    return out


def ranking_lines(group: list[tuple[str, Path, dict[str, Any]]]) -> list[str]:
    """Each member's ranking by mean test accuracy, and whether the members' rankings of the same variants agree."""
    ranked = rankings(group)
    if len(ranked) < 2:
        return []
    lines = [f"- {member}: {' > '.join(order)}" for member, order in ranked]
    shared = set.intersection(*(set(order) for _, order in ranked))
    orders = {tuple(v for v in order if v in shared) for _, order in ranked}
    verdict = "the same in every study" if len(orders) == 1 else "**differs between the studies**"
    return ["Ranking by mean test accuracy (an order within its studies' intervals is not a significant one):",
            "", *lines, "", f"Ranking of the variants they share: {verdict}."]


def cross_study_lines(group: list[tuple[str, Path, dict[str, Any]]]) -> list[str]:
    baseline, name, found = cross_study_rows(group)
    header = f"Δ test vs {baseline} (paired by seed: its own study's, else {name}'s)"
    lines = [f"| study | variant | seeds | test acc mean ± std | {header} |", "|---|---|---|---|---|"]
    for member, variant, seeds, test, delta in found:
        spread = "-" if test is None else f"{test.mean:.4f}" + (f" ± {test.std:.4f}" if test.std is not None else "")
        shown = "-" if delta is None else f"{delta.mean:+.4f} {stats.interval_text(delta, lambda x: f'{x:+.4f}')}"
        lines.append(f"| {member} | {variant} | {seeds} | {spread} | {shown} |")
    ranking = ranking_lines(group)
    return (lines if found else []) + (["", *ranking] if ranking else [])


def derived_values(group: list[tuple[str, Path, dict[str, Any]]]) -> list[float]:
    """The numbers the page computes from a study's results.json (not stored in it)."""
    walls = [wall_seconds(r) for _, _, r in group]
    out = [x for w in walls if w is not None for x in (w, w / 60)]
    if walls and all(w is not None for w in walls):
        out += [sum(walls), sum(walls) / 60]
    for _, _, results in group:
        for entry in summary_of(results).values():
            mde = stats.min_detectable_effect(entry.get("delta_std"), entry.get("delta_n") or 0)
            out += [mde] if mde is not None and entry.get("delta_paired") else []
            train = Summary.from_fields(entry, "train_delta")
            out += [train.mean, *(train.interval or ())] if train else []
    for *_, test, delta in cross_study_rows(group)[2] if len(group) > 1 else []:
        for s in (test, delta):
            out += [s.mean, *([s.std] if s.std is not None else []), *(s.interval or ())] if s else []
    return out


def fixed_texts() -> list[str]:
    """Rule sentences the page prints verbatim from sptune's constants: their numbers are the rules', not results."""
    return [stats.INTERVAL_RULE, stats.MDE_RULE, FIXED_N_RULE, LR_RULE, EPOCH_RULE, UNCONVERGED_TEXT,
            *SPREAD_TEXT.values()]
