"""Write docs/results.md from the output directories of the studies listed in a manifest.

The manifest (docs/results_studies.yaml) lists each study: its title, the exact command that produced
it, its output directory and the lead's sentence comparing it with the papers. For each study (or each
member of a campaign) the page shows the wall time (from the study's own timeline in results.json),
its results table (sptune.judging.results.summary_table: mean ± std over seeds, the 95 % interval, Δ vs the
like-for-like baseline with its interval), the report's fairness flags (from report.md), the
accuracy-vs-LR figure and a link to the report, both copied into docs/results/<study>/. A campaign whose
later studies have no baseline (the SPT-budget axis) gets their Δ paired by seed with the baseline rows
of the member that has them (sptune.judging.stats.paired_delta, the rule results.json uses).

    python tools/results_page.py                       # docs/results_studies.yaml -> docs/results.md
    python tools/results_page.py --print-commands      # the commands, to run them back to back
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import yaml

from sptune.judging import stats
from sptune.judging.results import summary_table

REPO = Path(__file__).resolve().parent.parent
MAX_COPY_BYTES = 2_000_000  # docs/ keeps small files only: a larger figure or report stays in the run
PLACEHOLDER = "*Comparison with the papers: to be written.*"


def load_manifest(path: Path) -> list[dict[str, Any]]:
    studies = (yaml.safe_load(path.read_text()) or {}).get("studies") or []
    for s in studies:
        missing = {"id", "title", "command", "output"} - set(s)
        if missing:
            raise SystemExit(f"{path}: study {s.get('id', '?')} lacks {', '.join(sorted(missing))}")
    return studies


def members(output: Path) -> list[tuple[str, Path, dict[str, Any]]]:
    """(name, directory, results.json) of a study, or of each study of a campaign, in run order."""
    results = json.loads((output / "results.json").read_text())
    if "campaign" not in results:
        return [(results.get("study", output.name), output, results)]
    return [(name, output / name, json.loads((output / name / "results.json").read_text()))
            for name in results["studies"]]


def wall_seconds(results: dict[str, Any]) -> float | None:
    """First stage released to last stage selected (the study's one Tuner), from results.json's timeline."""
    spans = [(float(t["start"]), float(t["end"])) for t in results.get("timeline") or [] if t.get("end")]
    return max(e for _, e in spans) - min(s for s, _ in spans) if spans else None


def _minutes(seconds: float | None) -> str:
    return "not recorded" if seconds is None else f"{seconds / 60:.1f} min ({seconds:.0f} s)"


def flags(directory: Path) -> list[str]:
    """The report's fairness flags with their items, as report.md lists them under '## Fairness flags'."""
    path = directory / "report.md"
    if not path.is_file():
        return []
    lines, inside = [], False
    for line in path.read_text().splitlines():
        if line.startswith("## "):
            inside = line.strip() == "## Fairness flags"
        elif inside and line.lstrip().startswith("- "):
            lines.append(line)
    return lines


def copy_assets(directory: Path, results: dict[str, Any], dest: Path, name: str) -> tuple[str | None, str | None]:
    """The accuracy-vs-LR PNG and report.html copied under dest; their paths relative to docs/."""
    dest.mkdir(parents=True, exist_ok=True)
    figure, report = directory / "figures" / f"{results.get('task')}-lr.png", directory / "report.html"
    out: list[str | None] = []
    for src, target in ((figure, dest / f"{name}-lr.png"), (report, dest / name / "report.html")):
        if src.is_file() and src.stat().st_size <= MAX_COPY_BYTES:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, target)
            out.append(target.relative_to(dest.parent.parent).as_posix())
        else:
            out.append(None)
    return out[0], out[1]


def cross_study_deltas(group: list[tuple[str, Path, dict[str, Any]]]) -> list[str]:
    """Δ test of the variants of studies without the baseline, paired by seed with the member that has it."""
    base = next(((n, r) for n, _, r in group if r.get("baseline") in r.get("summary", {})), None)
    if base is None:
        return []
    name, results = base
    baseline = results["baseline"]
    base_rows = stats.values_by_seed([r for r in results["rows"] if r["variant"] == baseline], "test_acc")
    lines = [f"| study | variant | seeds | test acc mean ± std | Δ test vs {baseline} of {name} (paired by seed) |",
             "|---|---|---|---|---|"]
    for member, _, r in group:
        for variant, entry in r.get("summary", {}).items():
            if variant == baseline:
                continue
            mine = stats.values_by_seed([x for x in r["rows"] if x["variant"] == variant], "test_acc")
            test, delta = stats.summarize(list(mine.values())), stats.paired_delta(mine, base_rows)
            spread = "-" if test is None else f"{test.mean:.4f}" + (f" ± {test.std:.4f}" if test.std is not None
                                                                      else "")
            shown = "-" if delta is None else f"{delta.mean:+.4f} {stats.interval_text(delta, lambda x: f'{x:+.4f}')}"
            lines.append(f"| {member} | {variant} | {entry['seeds']} | {spread} | {shown} |")
    return lines


def member_section(name: str, directory: Path, results: dict[str, Any], dest: Path) -> list[str]:
    figure, report = copy_assets(directory, results, dest, name)
    lines = [f"#### {name}", "", f"Wall time: {_minutes(wall_seconds(results))}, first stage started to last "
             "stage selected (results.json timeline)." + (f" Report: [report.html]({report})." if report else ""),
             "", summary_table(results.get("summary") or {}, results.get("baseline") or stats.DEFAULT_BASELINE), ""]
    found = flags(directory)
    if found:
        lines += ["Fairness flags (from the report):", "", *found, ""]
    if figure:
        lines += [f"![accuracy vs learning rate, {name}]({figure})", ""]
    return lines


def study_section(study: dict[str, Any], root: Path, docs: Path) -> list[str]:
    output = (root / study["output"]).resolve()
    lines = [f"## {study['title']}", "", "```bash", study["command"].strip(), "```", ""]
    reference = [f"Papers' numbers: {study['reference']}", ""] if study.get("reference") else []
    if not (output / "results.json").is_file():
        return lines + [f"*Not run yet: no results in `{study['output']}`.*", ""] + reference
    group = members(output)
    total = [wall_seconds(r) for _, _, r in group]
    if len(group) > 1 and all(t is not None for t in total):
        lines += [f"Wall time, all {len(group)} studies: {_minutes(sum(total))}.", ""]
    for name, directory, results in group:
        lines += member_section(name, directory, results, docs / "results" / study["id"])
    cross = cross_study_deltas(group) if len(group) > 1 else []
    if len(cross) > 2:
        lines += ["#### Across the studies", "", *cross, ""]
    return lines + reference + [study.get("papers") or PLACEHOLDER, ""]


def render(studies: list[dict[str, Any]], root: Path, docs: Path, intro: str = "") -> str:
    lines = ["# Results", "", intro.strip() or "Each study below was run with the command shown, from the repository "
             "root; the numbers are read from its results.json.", ""]
    for study in studies:
        lines += study_section(study, root, docs)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--manifest", type=Path, default=REPO / "docs" / "results_studies.yaml")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "results.md")
    ap.add_argument("--root", type=Path, default=REPO, help="where the commands ran (output paths are relative to it)")
    ap.add_argument("--print-commands", action="store_true", help="print the studies' commands and exit")
    args = ap.parse_args(argv)
    studies = load_manifest(args.manifest)
    if args.print_commands:
        print("\n".join(s["command"].strip() for s in studies))
        return 0
    intro = (yaml.safe_load(args.manifest.read_text()) or {}).get("intro", "")
    args.out.write_text(render(studies, args.root, args.out.parent, intro))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
