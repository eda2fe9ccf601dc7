"""Whether docs/results.md can be traced to committed files: it re-renders unchanged from docs/results/*/ and the
manifest, each number on it is in its study's committed files, and each study's commit is an ancestor of HEAD.

Which numbers are checked: every decimal (0.9656), signed number (+0.66, −2, -0.1560), number in scientific
notation (1.25e-3) and decimal percentage (95.3 %); bare integers (seed counts, epochs, "Table 3") are not.
Skipped: fenced code blocks (the commands), inline code that is a hash (commit, sha256), and the rule sentences
the page prints verbatim from sptune's constants (results_sections.fixed_texts: their numbers are the rules').
A number matches a value when they agree to the number's own last digit (0.9656 matches 0.96558); one followed by
% or pt is a percentage of the value, one without a unit may be either (prose writes Δ in points). A number in a
study's section must match a value of that study: a numeric leaf of its results.json or spec.yaml, a number the
page derives from them (results_sections.derived_values), or, as written, a number of the manifest's
`reference:` for it (the papers' numbers, quoted). A number matches within its own precision, so one written
with few digits (+12 pt: anything from 11.5 to 12.5) can match an unrelated value: quote results with the
digits the page gives them. The table of the papers' claims is checked row by row from the manifest (claim_problems):
a claim's numbers against its study's `reference:` quotes, its evidence's against that study's values."""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from results_page import CLAIMS_HEADING, claim_studies, load_claims, load_manifest, render_file
from results_sections import DIRTY_TEXT, derived_values, fixed_texts, members, read_spec

from sptune.output_files import RESULTS_JSON

NUMBER = re.compile(r"(?<![\w.])([+\-−]?)(\d+)(?:\.(\d+))?(?:[eE]([+\-−]?\d+))?(?!\w)(?!\.\d)(\s?(?:%|pts?\b))?")
HASH_CODE = re.compile(r"`[0-9a-f]{7,64}`")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


@dataclass(frozen=True)
class Number:
    text: str
    value: float
    half_step: float  # half a unit of its last digit: the rounding it was written with
    percent: bool  # followed by % or pt


def numbers(text: str) -> list[Number]:
    """The checked numbers of a text (decimals, signed, scientific, decimal percentages), in order."""
    found = []
    for m in NUMBER.finditer(text):
        sign, whole, frac, exp, unit = m.groups()
        if not (frac or exp or sign):
            continue
        scale = 10.0 ** int(exp.replace("−", "-")) if exp else 1.0
        value = float(f"{whole}.{frac or '0'}") * scale * (-1 if sign in ("-", "−") else 1)
        found.append(Number(m.group(0).strip(), value, 0.5 * 10.0 ** -len(frac or "") * scale, bool(unit)))
    return found


def checked_text(page: str) -> str:
    """The page without what is not checked: code blocks, hashes, the rules' verbatim sentences."""
    text = HASH_CODE.sub(" ", FENCE.sub(" ", page))
    for fixed in fixed_texts():
        text = text.replace(fixed, " ")
    return text


def leaves(node: Any) -> list[float]:
    """Every number of a parsed JSON or YAML document."""
    if isinstance(node, dict):
        return [x for v in node.values() for x in leaves(v)]
    if isinstance(node, list):
        return [x for v in node for x in leaves(v)]
    return [float(node)] if isinstance(node, (int, float)) and not isinstance(node, bool) else []


def study_values(study: dict[str, Any], docs: Path) -> tuple[list[float], list[float]]:
    """(the values a study's numbers may show: its committed files' and what the page derives from them,
    the papers' numbers its `reference:` quotes)."""
    quoted = [n.value for n in numbers(str(study.get("reference") or ""))]
    folder = docs / "results" / study["id"]
    if not (folder / RESULTS_JSON).is_file():
        return [], quoted
    group = members(folder)
    values = leaves(json.loads((folder / RESULTS_JSON).read_text())) if len(group) > 1 else []
    for _, directory, results in group:
        values += leaves(results) + leaves(read_spec(directory))
    return values + derived_values(group), quoted


def _matches(n: Number, values: list[float], quoted: list[float]) -> bool:
    scales = (100.0,) if n.percent else (1.0, 100.0)
    tolerance = n.half_step * (1 + 1e-9) + 1e-15
    return (any(abs(v * s - n.value) <= tolerance for v in values for s in scales)
            or any(abs(q - n.value) <= tolerance for q in quoted))


def sections(page: str, studies: list[dict[str, Any]]) -> list[tuple[dict[str, Any] | None, str]]:
    """The page cut at its '## ' headings: (the manifest study of that title, or None, the section's text)."""
    by_title = {f"## {s['title']}": s for s in studies}
    parts: list[tuple[dict[str, Any] | None, list[str]]] = [(None, [])]
    for line in page.splitlines():
        if line.startswith("## "):
            parts.append((by_title.get(line.strip()), []))
        parts[-1][1].append(line)
    return [(study, "\n".join(lines)) for study, lines in parts]


def untraceable(page: str, studies: list[dict[str, Any]], docs: Path) -> list[str]:
    """Each checked number of the page that matches no value of its study (outside a study: of any)."""
    values = {s["id"]: study_values(s, docs) for s in studies}
    everything = ([v for vs, _ in values.values() for v in vs], [])
    problems = []
    for study, text in sections(page, studies):
        if text.startswith(CLAIMS_HEADING):
            continue  # rendered from the manifest's claims, each checked against its own study (claim_problems)
        allowed, quoted = values[study["id"]] if study else everything
        where = f"in '{study['title']}'" if study else "outside any study's section"
        for line in checked_text(text).splitlines():
            problems += [f"{n.text!r} {where} is in no committed file: {line.strip()[:160]}"
                         for n in numbers(line) if not _matches(n, allowed, quoted)]
    return problems


def claim_problems(claims: list[dict[str, Any]], studies: list[dict[str, Any]], docs: Path) -> list[str]:
    """Each number of a claim row that its studies do not hold: the claim's must be their `reference:` quotes
    (the papers'), the evidence's their values or those quotes."""
    by_id = {s["id"]: s for s in studies}
    problems = []
    for c in claims:
        values, quoted = [], []
        for study in (by_id[x] for x in claim_studies(c) if x in by_id):
            mine, theirs = study_values(study, docs)
            values, quoted = values + mine, quoted + theirs
        where = f"in the claim row '{str(c['claim'])[:50]}'"
        problems += [f"{n.text!r} {where} is not a number its study's reference: quotes"
                     for n in numbers(str(c["claim"])) if not _matches(n, [], quoted)]
        problems += [f"{n.text!r} {where} is in no committed file of {', '.join(claim_studies(c))}"
                     for n in numbers(str(c["evidence"])) if not _matches(n, values, quoted)]
    return problems


def study_commits(studies: list[dict[str, Any]], docs: Path) -> list[tuple[str, dict[str, Any]]]:
    """(study or member name, results.json's provenance.git) of every collected study."""
    found = []
    for study in studies:
        folder = docs / "results" / study["id"]
        if (folder / RESULTS_JSON).is_file():
            found += [(name, (r.get("provenance") or {}).get("git") or {}) for name, _, r in members(folder)]
    return found


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=30)


def history_missing(repo: Path) -> str | None:
    """Why commits cannot be checked here (no git history: a tarball; a shallow clone), else None."""
    inside = _git(repo, "rev-parse", "--is-inside-work-tree")
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        return f"{repo} has no git history (a tarball or an export): the studies' commits cannot be checked"
    if _git(repo, "rev-parse", "--is-shallow-repository").stdout.strip() == "true":
        return f"{repo} is a shallow clone: fetch its full history (git fetch --unshallow) to check the commits"
    return None


def commit_problems(commits: list[tuple[str, dict[str, Any]]], repo: Path) -> list[str]:
    """Each study without a commit, or whose commit is not an ancestor of HEAD (call after history_missing)."""
    problems = []
    for name, git in commits:
        if not git.get("commit"):
            problems.append(f"{name}: results.json records no commit: its numbers cannot be traced to code")
            continue
        done = _git(repo, "merge-base", "--is-ancestor", git["commit"], "HEAD")
        if done.returncode != 0:
            why = "not an ancestor of HEAD" if done.returncode == 1 else "not in this repository's history"
            problems.append(f"{name}: commit {git['commit'][:12]} is {why}: rerun it from this history, or "
                            "merge the branch it ran on")
    return problems


def dirty_unflagged(page: str, studies: list[dict[str, Any]], docs: Path) -> list[str]:
    """Each study that ran with uncommitted changes whose section does not say so."""
    text = dict((s["id"], t) for s, t in sections(page, studies) if s)
    commits = {s["id"]: study_commits([s], docs) for s in studies}
    return [f"{name} ran with uncommitted changes and its section does not say so"
            for sid, found in commits.items() for name, git in found
            if git.get("dirty") and DIRTY_TEXT not in text.get(sid, "")]


def check_page(manifest: Path, page_path: Path, docs: Path, repo: Path) -> list[str]:
    """Everything the CI test checks, as a list of problems (empty: the page is traceable)."""
    studies, page = load_manifest(manifest), page_path.read_text()
    problems = [] if render_file(manifest, docs) == page else [
        f"{page_path} differs from what tools/results_page.py renders from the committed files: re-render it"]
    problems += untraceable(page, studies, docs) + dirty_unflagged(page, studies, docs)
    problems += claim_problems(load_claims(manifest), studies, docs)
    missing = history_missing(repo)
    if missing:
        print(f"note: {missing}")
        return problems
    return problems + commit_problems(study_commits(studies, docs), repo)
