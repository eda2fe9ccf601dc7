"""sptune.judging.stats, the one statistics module: t-intervals for few seeds, no interval for one, the baseline rule,
paired and unpaired deltas; results.json/results.md and the report agree, and results.md has one writer."""

from __future__ import annotations

import csv
import json
import math
from dataclasses import asdict
from pathlib import Path

import pytest

from sptune.judging import results
from sptune.judging.stats import (
    Summary,
    baseline_variant,
    interval_text,
    min_detectable_effect,
    paired_delta,
    summarize,
    welch_delta,
)
from sptune.report import build_report
from sptune.report.cells import aggregate

# t(0.975, df) from a printed Student-t table, so the tests do not check scipy against itself.
T975 = {1: 12.706204736174704, 2: 4.302652729749464, 3: 3.182446305284263, 4: 2.7764451051977987}
T80 = {2: 1.0606601717798212, 4: 0.9409645772}  # t(0.8, df), for the power of the smallest detectable Δ
ACC = {"scratch": [0.900, 0.920, 0.950], "spt": [0.930, 0.945, 0.990], "frozen": [0.880, 0.905, 0.915]}


def t_interval(values: list[float]) -> tuple[float, float]:
    n = len(values)
    mean = sum(values) / n
    s = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = T975[n - 1] * s / math.sqrt(n)
    return mean - half, mean + half


def make_rows(acc: dict[str, list[float]], kinds: dict[str, str] | None = None) -> list[results.ResultRow]:
    kinds = kinds or {}
    return [results.ResultRow(variant=v, kind=kinds.get(v, v), task="digits", seed=seed, lr=1e-3, batch_size=32,
                              best_epoch=4, val_acc=a + 0.01, test_acc=a, test_loss=0.3, trials=5, diverged=0,
                              failed=0, trial_epochs=20, trial_id=f"{v}-{seed}", mlflow_run_id=None, checkpoint="-")
            for v, values in acc.items() for seed, a in enumerate(values)]


def report_cells(rows: list[results.ResultRow], baseline: str = "scratch") -> dict:
    variants = list(dict.fromkeys(r.variant for r in rows))
    rows = [{**asdict(r), "seed": str(r.seed)} for r in rows]  # the report reads seeds as text
    return aggregate(rows, ["digits"], variants, {r["variant"]: r["kind"] for r in rows}, baseline)


def write_study(out: Path, rows: list[results.ResultRow], baseline: str = "scratch") -> Path:
    out.mkdir(parents=True, exist_ok=True)
    results.add_deltas(rows, baseline)
    study = {"study": "stats", "task": "digits", "summary": results.summarize(rows, baseline)}
    results.write_results(out, study, rows, baseline)
    return out


def test_three_seeds_give_the_t_interval_wider_than_the_range():
    s = summarize(ACC["scratch"])
    lo, hi = t_interval(ACC["scratch"])
    assert s.interval == pytest.approx((lo, hi), abs=1e-9) and s.method == "t" and s.n == 3
    assert s.interval[0] < min(ACC["scratch"]) and s.interval[1] > max(ACC["scratch"])  # never [min, max]
    assert s.std == pytest.approx(0.025166114784235822, abs=1e-12)  # sample std (ddof=1)
    assert "95 % t-interval, n = 3" in interval_text(s, str)


def test_one_seed_has_no_std_and_no_interval():
    s = summarize([0.91])
    assert (s.mean, s.std, s.interval, s.method, s.n) == (0.91, None, None, None, 1)
    assert interval_text(s, str) == "(n = 1: no interval)"
    assert summarize([]) is None


def test_one_seed_results_md_says_there_is_no_interval(tmp_path):
    out = write_study(tmp_path / "one", make_rows({"scratch": [0.90], "spt": [0.93]}))
    md = (out / "results.md").read_text()
    assert "n = 1: no interval" in md
    assert "[0.9000, 0.9000]" not in md and "[+0.0300, +0.0300]" not in md  # no zero-width interval
    entry = json.loads((out / "results.json").read_text())["summary"]["scratch"]
    assert entry["test_acc_std"] is None and entry["test_acc_ci95"] is None and entry["test_acc_ci_method"] is None


def test_results_and_report_give_the_same_numbers():
    eight = [0.885, 0.931, 0.902, 0.948, 0.913, 0.894, 0.925, 0.941]  # enough seeds for resampling to differ
    rows = make_rows({"eight": eight, **ACC})
    summary, cells = results.summarize(rows), report_cells(rows)
    for variant in ("eight", *ACC):
        cell = cells[("digits", variant)]
        assert Summary.from_fields(summary[variant], "test_acc") == cell.test_summary
        assert Summary.from_fields(summary[variant], "delta") == cell.delta
    assert summary["spt"]["delta_ci95"] == pytest.approx(
        t_interval([a - b for a, b in zip(ACC["spt"], ACC["scratch"], strict=True)]), abs=1e-9)


def test_without_a_variant_named_scratch_there_is_no_delta():
    acc = {"frozen": ACC["frozen"], "spt": ACC["spt"]}
    rows = make_rows(acc, kinds={"frozen": "scratch"})  # of kind scratch, but not named so: no guessing
    results.add_deltas(rows)
    assert all(r.delta_test_vs_baseline is None for r in rows)
    summary = results.summarize(rows)
    assert not any("delta_mean" in entry for entry in summary.values())
    assert all(c.delta is None for c in report_cells(rows).values())
    assert baseline_variant(list(acc)) is None
    assert "No Δ: no variant is named 'scratch'" in results.summary_table(summary)


def test_a_named_baseline_is_the_one_every_delta_is_against():
    rows = make_rows(ACC)
    results.add_deltas(rows, baseline="frozen")
    by = {(r.variant, r.seed): r for r in rows}
    assert by[("spt", 1)].delta_test_vs_baseline == pytest.approx(ACC["spt"][1] - ACC["frozen"][1])
    assert by[("frozen", 1)].delta_test_vs_baseline is None
    assert by[("scratch", 0)].delta_test_vs_baseline == pytest.approx(ACC["scratch"][0] - ACC["frozen"][0])
    summary, cells = results.summarize(rows, baseline="frozen"), report_cells(rows, baseline="frozen")
    assert summary["spt"]["delta_vs"] == "frozen" and "delta_mean" not in summary["frozen"]
    assert summary["scratch"]["delta_mean"] == pytest.approx(sum(ACC["scratch"]) / 3 - sum(ACC["frozen"]) / 3)
    assert cells[("digits", "spt")].baseline == "frozen" and cells[("digits", "frozen")].delta is None


def test_delta_is_paired_by_seed_else_welch():
    paired = paired_delta({"0": 0.95, "1": 0.97, "2": 0.96}, {"0": 0.90, "1": 0.93, "2": 0.90})
    assert paired.paired and paired.interval == pytest.approx(t_interval([0.05, 0.04, 0.06]), abs=1e-9)
    assert "(95 % t-interval, paired by seed, n = 3: seeds 0, 1, 2)" in interval_text(paired, str)
    a, b = [0.95, 0.97, 0.99], [0.90, 0.92]
    unpaired = paired_delta(dict(zip("012", a, strict=True)), dict(zip("34", b, strict=True)))
    assert unpaired == welch_delta(a, b) and unpaired.paired is False and unpaired.method == "welch"
    assert "(95 % Welch interval, unpaired, n = 3 vs 2)" in interval_text(unpaired, str)
    se = math.sqrt(0.02**2 / 3 + 0.0002 / 2)  # sample variances 0.0004 and 0.0002, over n per side
    half = unpaired.interval[1] - unpaired.mean
    assert unpaired.mean == pytest.approx(0.06) and unpaired.mean - unpaired.interval[0] == pytest.approx(half)
    assert T975[3] * se < half < T975[2] * se  # Welch-Satterthwaite df = 2.88, between 2 and 3
    one = paired_delta({"0": 0.95}, {"1": 0.90, "2": 0.91})
    assert one.interval is None and interval_text(one, str) == "(unpaired, n = 1 vs 2: no interval)"


def test_report_reads_the_baseline_and_never_rewrites_results_md(tmp_path):
    out = write_study(tmp_path / "study", make_rows({**ACC, "single": [0.97]}), baseline="frozen")
    md_path = out / "results.md"
    before = (md_path.read_bytes(), md_path.stat().st_mtime_ns)
    assert json.loads((out / "results.json").read_text())["baseline"] == "frozen"
    page = build_report(out).read_text()
    assert (md_path.read_bytes(), md_path.stat().st_mtime_ns) == before  # results.md has one writer
    assert "Δ vs frozen" in page and "Δ vs scratch" not in page and "95 % t-interval, n = 3" in page
    assert "Δ vs 'frozen'" in (out / "report.md").read_text()
    table = {r["variant"]: r for r in csv.DictReader((out / "results.csv").open())}
    assert table["scratch"]["test_acc_ci_method"] == "t" and float(table["scratch"]["test_acc_ci_low"]) < 0.90
    assert table["single"]["test_acc_ci_low"] == table["single"]["test_acc_ci_method"] == ""


CAUSAL = {"scratch": [0.900, 0.920, 0.950], "scratch_causal": [0.850, 0.860, 0.880],
          "spt_causal": [0.900, 0.905, 0.925], "spt": ACC["spt"]}


def test_a_causal_variant_is_paired_with_the_causal_scratch_in_results_and_report(tmp_path):
    rows = make_rows(CAUSAL)
    out = write_study(tmp_path / "causal", rows)
    by = {(r.variant, r.seed): r for r in rows}
    assert by[("spt_causal", 2)].delta_test_vs_baseline == pytest.approx(0.925 - 0.880)
    assert by[("spt_causal", 2)].delta_baseline == "scratch_causal" and by[("spt", 2)].delta_baseline == "scratch"
    assert by[("scratch", 0)].delta_baseline is None
    summary, cells = json.loads((out / "results.json").read_text())["summary"], report_cells(rows)
    entry = summary["spt_causal"]
    assert (entry["delta_vs"], entry["delta_like_for_like"]) == ("scratch_causal", True)
    assert entry["delta_mean"] == pytest.approx((0.900 + 0.905 + 0.925 - 0.850 - 0.860 - 0.880) / 3)
    for variant in CAUSAL:  # the report pairs by the same rule: the same Δ against the same variant
        assert Summary.from_fields(summary[variant], "delta") == cells[("digits", variant)].delta
        assert summary[variant].get("delta_vs") == cells[("digits", variant)].baseline
    md = (out / "results.md").read_text()
    assert "| scratch_causal (like-for-like: both causal) |" in md
    assert "| scratch (not like-for-like: causal vs bidirectional) |" in md  # scratch_causal's own Δ
    assert "0.0450 | scratch_causal |" in md  # the per-row Δ names its baseline
    page = build_report(out).read_text()
    assert "Δ vs scratch_causal" in page and "like-for-like: both causal" in page


def test_a_causal_variant_with_only_a_bidirectional_baseline_is_marked(tmp_path):
    out = write_study(tmp_path / "mixed", make_rows({"scratch": CAUSAL["scratch"], "spt_causal": CAUSAL["spt_causal"]}))
    entry = json.loads((out / "results.json").read_text())["summary"]["spt_causal"]
    assert (entry["delta_vs"], entry["delta_like_for_like"]) == ("scratch", False)
    assert entry["delta_pairing"] == "not like-for-like: causal vs bidirectional"
    assert "| scratch (not like-for-like: causal vs bidirectional) |" in (out / "results.md").read_text()
    assert "not like-for-like: causal vs bidirectional" in build_report(out).read_text()


def test_the_report_pairs_spt_by_the_studys_pretrain_objective(tmp_path):
    """`spt` follows pretrain.objective: with the causal one it is a causal model, paired with the causal scratch,
    in results.json (the study passes the objective) and in the report (read from spec.yaml)."""
    rows = make_rows({k: CAUSAL[k] for k in ("scratch", "scratch_causal", "spt")})
    out = tmp_path / "spt_causal_objective"
    out.mkdir()
    results.add_deltas(rows, "scratch", pretrain_objective="causal")
    summary = results.summarize(rows, "scratch", pretrain_objective="causal")
    results.write_results(out, {"study": "s", "task": "digits", "summary": summary}, rows)
    (out / "spec.yaml").write_text("pretrain: {objective: causal}\n")
    assert summary["spt"]["delta_vs"] == "scratch_causal" and {r.delta_baseline for r in rows} == {
        None, "scratch", "scratch_causal"}
    build_report(out)
    written = {r["variant"]: r for r in csv.DictReader((out / "results.csv").open())}
    assert written["spt"]["delta_vs"] == "scratch_causal" and written["spt"]["delta_pairing"] == (
        "like-for-like: both causal")


# The scratch: one of three re-run seeds collapsed; its t-interval reached past 100 %.
COLLAPSED = [0.880, 0.969, 0.947]


def test_an_accuracy_interval_stays_within_0_and_1_and_says_it_was_clipped():
    s = summarize(COLLAPSED)
    lo, hi = t_interval(COLLAPSED)
    assert hi > 1.0  # unclipped: [0.8168, 1.0475]
    assert s.interval == pytest.approx((lo, 1.0), abs=1e-12) and s.clipped and s.method == "t"
    assert interval_text(s, "{:.4f}".format) == "[0.8168, 1.0000]‡ (95 % t-interval clipped, n = 3)"
    inside = summarize(ACC["scratch"])
    assert not inside.clipped and inside.interval == pytest.approx(t_interval(ACC["scratch"]), abs=1e-12)
    assert summarize([0.0, 0.02, 0.0]).interval[0] == 0.0  # the lower bound too
    assert summarize(COLLAPSED, bounds=None).interval == pytest.approx((lo, hi), abs=1e-12)


def test_a_delta_interval_stays_within_minus_1_and_1_and_names_its_seeds():
    paired = paired_delta({"0": 1.0, "1": 0.5, "2": 1.0, "3": 0.9}, {"0": 0.0, "1": 0.4, "2": 0.0})
    assert paired.seeds == ("0", "1", "2") and paired.n == 3  # seed 3 has no baseline run: not in the Δ
    assert paired.interval[1] == 1.0 and paired.interval[0] > -1.0 and paired.clipped
    assert "‡ (95 % t-interval clipped, paired by seed, n = 3: seeds 0, 1, 2)" in interval_text(paired, str)
    welch = welch_delta([1.0, 0.2, 1.0], [0.0, 0.1])
    assert -1.0 <= welch.interval[0] and welch.interval[1] == 1.0 and welch.clipped
    one = paired_delta({"7": 0.95}, {"7": 0.90})
    assert interval_text(one, str) == "(paired by seed, n = 1: seed 7; no interval)"


def test_results_md_json_and_report_carry_the_clipped_interval_and_the_deltas_seeds(tmp_path):
    rows = make_rows({"scratch": COLLAPSED, "spt": [0.95, 0.96, 0.97]})
    out = write_study(tmp_path / "clipped", rows)
    summary = json.loads((out / "results.json").read_text())["summary"]
    assert summary["scratch"]["test_acc_ci95"][1] == 1.0 and summary["scratch"]["test_acc_ci_clipped"] is True
    assert summary["spt"]["delta_seeds"] == ["0", "1", "2"] and summary["spt"]["delta_n"] == 3
    assert summary["spt"]["test_acc_ci_clipped"] is False
    md = (out / "results.md").read_text()
    assert "1.0000]‡ (95 % t-interval clipped, n = 3)" in md and "‡: clipped to [0, 1]" in md
    assert "paired by seed, n = 3: seeds 0, 1, 2)" in md
    cell = report_cells(rows)[("digits", "scratch")]
    assert Summary.from_fields(summary["scratch"], "test_acc") == cell.test_summary
    assert "100.00]‡" in build_report(out).read_text()


def test_smallest_detectable_delta_is_the_t_power_formula():
    # (t(0.975, n-1) + t(0.8, n-1)) * s / sqrt(n), with the quantiles from a printed table.
    assert min_detectable_effect(0.02, 5) == pytest.approx((T975[4] + T80[4]) * 0.02 / math.sqrt(5), rel=1e-8)
    assert min_detectable_effect(0.03, 3) == pytest.approx((T975[2] + T80[2]) * 0.03 / math.sqrt(3), rel=1e-8)
    # Without a spread there is nothing to say: one seed, no std, a NaN std.
    assert min_detectable_effect(0.02, 1) is None and min_detectable_effect(None, 5) is None
    assert min_detectable_effect(float("nan"), 5) is None
    # More seeds with the same spread detect a smaller difference; a higher power asks for a larger one.
    assert min_detectable_effect(0.02, 10) < min_detectable_effect(0.02, 5) < min_detectable_effect(0.02, 3)
    assert min_detectable_effect(0.02, 5, power=0.9) > min_detectable_effect(0.02, 5)


def test_train_accuracy_gets_a_delta_paired_by_seed_in_results_json_and_md(tmp_path):
    rows = make_rows({"scratch": [0.90, 0.92, 0.95], "spt": [0.93, 0.945, 0.99]})
    for r, train in zip(rows, [0.95, 0.96, 0.99, 0.99, 0.97, 1.0], strict=True):
        r.train_acc = train
    out = write_study(tmp_path / "train", rows)
    spt = json.loads((out / "results.json").read_text())["summary"]["spt"]
    assert spt["train_delta_mean"] == pytest.approx(0.02, abs=1e-12)
    assert spt["train_delta_ci95"] == pytest.approx(t_interval([0.04, 0.01, 0.01]), abs=1e-9)
    assert spt["train_delta_paired"] and spt["train_delta_seeds"] == ["0", "1", "2"]
    lo, hi = t_interval([0.04, 0.01, 0.01])
    assert f"| 0.9867 | +0.0200 [{lo:+.4f}, {hi:+.4f}] |" in (out / "results.md").read_text()
    assert "train_delta_mean" not in json.loads((out / "results.json").read_text())["summary"]["scratch"]
    build_report(out)  # the report's per-seed table shows each checkpoint's train accuracy beside its test accuracy
    seed_rows = [line for line in (out / "report.md").read_text().splitlines() if line.startswith("| digits | spt |")]
    assert [line.split(" | ")[7:9] for line in seed_rows] == [["93.00", "99.00"], ["94.50", "97.00"],
                                                                ["99.00", "100.00"]]


def test_a_summary_stored_before_train_deltas_gets_them_from_its_rows_and_a_stored_one_is_kept():
    rows = [{"variant": v, "seed": s, "train_acc": a} for v, accs in
            {"scratch": [0.5, 0.6], "spt": [0.55, 0.7]}.items() for s, a in zip((1000, 1001), accs, strict=True)]
    old = {"scratch": {"seeds": 2, "test_acc_mean": 0.5},
           "spt": {"seeds": 2, "test_acc_mean": 0.6, "delta_vs": "scratch"}}
    filled = results.with_train_deltas(old, rows)
    assert filled["spt"]["train_delta_mean"] == pytest.approx(0.075) and "train_delta_mean" not in old["spt"]
    kept = results.with_train_deltas({"spt": {**old["spt"], "train_delta_mean": 0.5}}, rows)
    assert kept["spt"]["train_delta_mean"] == 0.5
    # No train accuracy stored (studies before it was measured): no Δ train, shown as "-".
    bare = results.with_train_deltas(old, [{**r, "train_acc": None} for r in rows])
    assert bare["spt"]["train_delta_mean"] is None
    assert results.summary_table(bare).splitlines()[3].endswith("| - |")
