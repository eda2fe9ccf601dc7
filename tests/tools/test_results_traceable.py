"""docs/results.md is traceable: it re-renders unchanged from the committed docs/results/*/ files and the manifest,
every number on it is in a committed file of its study (tools/results_trace.py says which numbers and how they
match), and each study's commit is an ancestor of HEAD (skipped, saying why, without git history).

The same checks run on a real study, collected into a temporary docs/ tree: tests/fixtures/digits_tiny_run/ is
the output (spec.yaml, results.json, results.md, report.md) of
    python -m sptune.sweep search_spaces/digits_quick.yaml --output runs/digits_tiny --set pretrain.epochs=3 \
        --set pretrain.num_samples=2 --set finetune.epochs=4 --set variants.scratch.num_samples=3 \
        --set variants.spt.num_samples=3 --set scheduler.type=fifo --set model.n_layers=1 --set rerun_seeds=3
run at commit 81696d6 (about 2 minutes on 2 cores). No study runs here."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sptune.judging.stats import min_detectable_effect

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
import results_page  # noqa: E402
import results_trace  # noqa: E402
from results_sections import DIRTY_TEXT  # noqa: E402

MANIFEST, DOCS = REPO / "docs" / "results_studies.yaml", REPO / "docs"
TINY_RUN = REPO / "tests" / "fixtures" / "digits_tiny_run"
TINY = {"id": "example_tiny", "title": "Tiny digits study", "output": "runs/digits_tiny",
        "command": "python -m sptune.sweep search_spaces/digits_quick.yaml --output runs/digits_tiny",
        "reference": "DESIGN.md's check: scratch ≈ 0.95, SPT ≈ 0.97.",
        "papers": "Level with scratch: Δ −15.60 pt, interval −86.74 … +55.54 pt, where the check saw 0.95 → 0.97."}


# ---------------------------------------------------------------- the committed page


def test_the_committed_page_re_renders_unchanged_from_the_committed_files(tmp_path):
    out = tmp_path / "results.md"
    assert results_page.main(["--out", str(out)]) == 0
    assert out.read_text() == (DOCS / "results.md").read_text(), (
        "docs/results.md is not what `python tools/results_page.py` renders from docs/results_studies.yaml and "
        "docs/results/*/: re-render it (and never edit it by hand)")


def test_every_number_on_the_committed_page_is_in_a_committed_file():
    studies, page = results_page.load_manifest(MANIFEST), (DOCS / "results.md").read_text()
    assert results_trace.untraceable(page, studies, DOCS) == []
    assert results_trace.dirty_unflagged(page, studies, DOCS) == []
    # The check is not vacuous: a number added to a copy of the page is caught.
    assert len(results_trace.untraceable(page + "\nSPT gains 0.0123 here.\n", studies, DOCS)) == 1


def test_the_page_shows_each_spt_checkpoint_against_the_trivial_predictors():
    from sptune.judging.trivial_check import trivial_lines

    page, shown = (DOCS / "results.md").read_text(), 0
    for study in results_page.load_manifest(MANIFEST):
        for _, _, results in results_page.members(DOCS / "results" / study["id"]):
            for line in trivial_lines(results)[2:]:
                assert line in page
                shown += 1
    assert shown >= 3  # the main job, the data-scale campaign and the converged CIFAR-16 study at least
    assert "neighbour_mean_loss 0.0710; beats the best of them" in page


def test_each_claim_on_the_committed_page_quotes_its_study_and_the_papers():
    claims, studies = results_page.load_claims(MANIFEST), results_page.load_manifest(MANIFEST)
    page = (DOCS / "results.md").read_text()
    assert claims and results_page.CLAIMS_HEADING in page
    assert results_trace.claim_problems(claims, studies, DOCS) == []
    # Not vacuous: a result no file holds, or a paper's number the study's reference does not quote, is caught.
    stray = [{**claims[0], "evidence": claims[0]["evidence"] + " SPT gains 0.0123."},
             {**claims[0], "claim": claims[0]["claim"] + " 0.61 in another run."}]
    found = results_trace.claim_problems(stray, studies, DOCS)
    assert [p.split()[0] for p in found] == ["'0.0123'", "'0.61'"]


def test_each_committed_study_ran_at_an_ancestor_of_head():
    missing = results_trace.history_missing(REPO)
    if missing:
        pytest.skip(missing)
    commits = results_trace.study_commits(results_page.load_manifest(MANIFEST), DOCS)
    assert results_trace.commit_problems(commits, REPO) == []


# ---------------------------------------------------------------- a real study, collected into a temporary docs/


def _page(tmp_path: Path, study: dict, claims: list | None = None) -> tuple[Path, Path, str]:
    manifest, docs = tmp_path / "m.yaml", tmp_path / "docs"
    manifest.write_text(json.dumps({"studies": [study], "claims": claims or []}))  # JSON is YAML
    results_page.main(["--manifest", str(manifest), "--docs", str(docs)])
    return manifest, docs, (docs / "results.md").read_text()


@pytest.fixture
def tiny(tmp_path) -> tuple[Path, Path, str]:
    results_page.collect(TINY_RUN, "example_tiny", tmp_path / "docs")
    return _page(tmp_path, TINY)


def test_a_real_study_collected_passes_every_check_and_states_what_it_could_tell(tiny):
    manifest, docs, page = tiny
    assert results_trace.check_page(manifest, docs / "results.md", docs, REPO) == []
    results = json.loads((TINY_RUN / "results.json").read_text())
    spt = results["summary"]["spt"]
    mde = min_detectable_effect(spt["delta_std"], spt["delta_n"])
    assert f"| spt | 3 / 3 | scratch | 3 | {spt['delta_std']:.4f} | {mde:.4f} |" in page
    assert "Budget: finetune_matched" in page and "| scratch | 4 epochs · 160 steps (batch 32) |" in page
    assert "Pretraining variance: **not included**" in page
    # spt's selected LR 7.61e-3 is within 1.5x of its range's top 1e-2; scratch's 1.25e-3 is inside.
    assert "| spt | loguniform [1e-4, 1e-2] | 7.61e-3 | **no: at the top of the range** | 4 epochs | 4/1/4 |" in page
    scratch = "| scratch | loguniform [1e-4, 1e-2] | 1.25e-3 | yes | 4 epochs | 4/3/4 | **no: may be unconverged** |"
    assert scratch in page
    assert "Commit `81696d6b823a` (clean working tree)" in page and DIRTY_TEXT not in page
    for name in ("spec.yaml", "results.json", "results.md", "report.md"):
        assert (docs / "results/example_tiny" / name).read_bytes() == (TINY_RUN / name).read_bytes()


def test_a_number_on_the_page_that_no_committed_file_holds_fails(tiny):
    manifest, docs, page = tiny
    studies = results_page.load_manifest(manifest)
    stray = page + "\nSPT gains 0.1234 here, +2.7 pt there, 95.3 % overall.\n"
    found = results_trace.untraceable(stray, studies, docs)
    assert [p.split()[0] for p in found] == ["'0.1234'", "'+2.7", "'95.3"]
    # A committed number edited on the page: neither traceable nor what the files render.
    edited = page.replace("0.5023 ± 0.0390", "0.5123 ± 0.0390")
    assert edited != page and results_trace.untraceable(edited, studies, docs)[0].startswith("'0.5123'")
    (docs / "results.md").write_text(edited)
    problems = results_trace.check_page(manifest, docs / "results.md", docs, REPO)
    assert any("differs from what tools/results_page.py renders" in p for p in problems)


def test_the_leads_sentence_may_quote_only_results_and_the_papers_numbers(tmp_path):
    results_page.collect(TINY_RUN, "example_tiny", tmp_path / "docs")
    manifest, docs, page = _page(tmp_path, {**TINY, "papers": "SPT's Δ is −15.60 pt; the papers see +31.4 pt."})
    problems = results_trace.check_page(manifest, docs / "results.md", docs, REPO)
    assert len(problems) == 1 and problems[0].startswith("'+31.4 pt'")  # rendered, but in no file nor reference


CLAIM = {"claim": "SPT beats scratch on digits: scratch ≈ 0.95, SPT ≈ 0.97.", "study": "example_tiny",
         "verdict": "inconclusive", "evidence": "Δ −15.60 pt [−86.74, +55.54] pt."}


def test_a_claim_row_names_its_study_and_verdict_and_is_checked_against_that_study(tmp_path):
    results_page.collect(TINY_RUN, "example_tiny", tmp_path / "docs")
    manifest, docs, page = _page(tmp_path, TINY, [CLAIM])
    row = ("| SPT beats scratch on digits: scratch ≈ 0.95, SPT ≈ 0.97. | `example_tiny` | **inconclusive** | "
           "Δ −15.60 pt [−86.74, +55.54] pt. |")
    assert row in page and page.index(results_page.CLAIMS_HEADING) < page.index(f"## {TINY['title']}")
    assert results_trace.check_page(manifest, docs / "results.md", docs, REPO) == []
    manifest, docs, _ = _page(tmp_path, TINY, [{**CLAIM, "claim": "SPT reaches 0.99."}])
    problems = results_trace.check_page(manifest, docs / "results.md", docs, REPO)
    assert len(problems) == 1 and problems[0].startswith("'0.99' in the claim row")


def test_a_claim_citing_several_studies_is_checked_against_all_of_them(tmp_path):
    other = tmp_path / "other"
    shutil.copytree(TINY_RUN, other)
    results = json.loads((other / "results.json").read_text())
    results["summary"]["spt"]["test_acc_mean"] = 0.4321  # a number only the second study holds
    (other / "results.json").write_text(json.dumps(results))
    docs = tmp_path / "docs"
    results_page.collect(TINY_RUN, "example_tiny", docs)
    results_page.collect(other, "example_other", docs)
    second = {**TINY, "id": "example_other", "title": "Another tiny study"}
    manifest = tmp_path / "m.yaml"
    both = {**CLAIM, "study": ["example_tiny", "example_other"], "evidence": "SPT 0.4321 there."}
    cases = (({**both, "study": "example_tiny"}, 1, "| `example_tiny` | **inconclusive** |"),
             (both, 0, "| `example_tiny`, `example_other` | **inconclusive** | SPT 0.4321 there. |"))
    for claim, problems, row in cases:
        manifest.write_text(json.dumps({"studies": [TINY, second], "claims": [claim]}))
        results_page.main(["--manifest", str(manifest), "--docs", str(docs)])
        assert row in (docs / "results.md").read_text()
        assert len(results_trace.claim_problems(results_page.load_claims(manifest), [TINY, second], docs)) == problems


@pytest.mark.parametrize(("change", "message"), [
    ({"verdict": "partly"}, "has verdict 'partly': use one of reproduced, not reproduced, inconclusive"),
    ({"study": "elsewhere"}, "cites study 'elsewhere', which is not a collected study of the manifest"),
    ({"evidence": None}, "lacks evidence"),
])
def test_a_malformed_claim_stops_the_page_naming_the_field(tmp_path, change, message):
    results_page.collect(TINY_RUN, "example_tiny", tmp_path / "docs")
    claim = {k: v for k, v in {**CLAIM, **change}.items() if v is not None}
    with pytest.raises(SystemExit, match=message):
        _page(tmp_path, TINY, [claim])


def test_a_study_run_with_uncommitted_changes_is_flagged_on_the_page(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(TINY_RUN, run)
    results = json.loads((run / "results.json").read_text())
    results["provenance"]["git"]["dirty"] = True
    (run / "results.json").write_text(json.dumps(results))
    results_page.collect(run, "example_tiny", tmp_path / "docs")
    manifest, docs, page = _page(tmp_path, TINY)
    assert f"Commit `81696d6b823a` **{DIRTY_TEXT}**" in page
    studies = results_page.load_manifest(manifest)
    assert results_trace.dirty_unflagged(page, studies, docs) == []
    assert results_trace.dirty_unflagged(page.replace(DIRTY_TEXT, "clean"), studies, docs) != []


def test_a_study_without_a_commit_or_off_the_history_is_not_traceable(tmp_path):
    missing = results_trace.history_missing(REPO)
    if missing:
        pytest.skip(missing)
    ok = [("tiny", json.loads((TINY_RUN / "results.json").read_text())["provenance"]["git"])]
    assert results_trace.commit_problems(ok, REPO) == []
    bad = [("none", {}), ("unknown", {"commit": "0" * 40, "dirty": False})]
    problems = results_trace.commit_problems(bad, REPO)
    assert "records no commit" in problems[0] and "not in this repository's history" in problems[1]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_merge_base_decides_ancestry_and_a_tarball_or_shallow_clone_is_said(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "commit", "-q", "--allow-empty", "-m", "a")
    first = _git(repo, "rev-parse", "HEAD")
    _git(repo, "checkout", "-q", "-b", "side")
    _git(repo, "commit", "-q", "--allow-empty", "-m", "side")
    side = _git(repo, "rev-parse", "HEAD")
    _git(repo, "checkout", "-q", "main")
    _git(repo, "commit", "-q", "--allow-empty", "-m", "b")
    assert results_trace.history_missing(repo) is None
    problems = results_trace.commit_problems([("a", {"commit": first}), ("side", {"commit": side})], repo)
    assert len(problems) == 1 and problems[0].startswith("side:") and "not an ancestor of HEAD" in problems[0]
    tarball = tmp_path / "tarball"
    tarball.mkdir()
    assert "no git history" in results_trace.history_missing(tarball)
    _git(tmp_path, "clone", "-q", "--depth", "1", f"file://{repo}", "shallow")
    assert "shallow clone" in results_trace.history_missing(tmp_path / "shallow")


def test_a_study_missing_a_field_stops_the_page_naming_it(tmp_path):
    with pytest.raises(SystemExit, match="studies entry 'example_tiny' lacks output"):
        _page(tmp_path, {k: v for k, v in TINY.items() if k != "output"})
