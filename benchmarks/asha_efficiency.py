"""Exhaustive LR x batch grid vs random search, Optuna, Optuna+ASHA, Optuna+SHA and Optuna+Hyperband,
all through sptune's real Tuners.

One variant (scratch) of the spec, finetuning only. Every method runs the study's own Tuner
(`sptune.tuning.tuner.staged_search` + `build_study_tuner`) over a one-stage plan from
`sptune.plan.study_plan.build_plan`, and its pick is made by `sptune.judging.selection.select_best`
(validation-best trial *and* epoch), exactly as in a study:

  grid              n_lrs log-spaced LRs over [lr_low, lr_high] x the batch list, FIFO, full epochs
                    (the reference: its best validation accuracy is the target to match)
  optuna+asha       Optuna (TPE, told results as trials finish) over loguniform [lr_low, lr_high] x
                    choice(batches), ASHA early stopping: both asynchronous, so the pick depends on load
  optuna+sha        batched TPE and synchronous successive halving (sptune's default): order-independent
  optuna+hyperband  batched TPE and synchronous Hyperband (brackets of SHA): order-independent
  random            random search, FIFO, as many full trials as fit in the budget
  optuna            Optuna (told results as trials finish), FIFO, same trials as random

The budget is `--budget-fraction` (default 1/3) of the grid's trial-epochs, met *by construction*:
SHA and Hyperband get the most trials whose planned rung sizes (`sptune.rules.rungs.planned_epochs`,
exact without failures) fit in it; random and Optuna as many full-length trials as fit; ASHA
(asynchronous: no bound) as many trials as SHA unless `--asha-samples` says otherwise.

A driver-side Tune callback records every epoch result in arrival order, which gives each
method's curve of best-found validation accuracy vs trial-epochs spent (in the JSON and a PNG;
a curve's *shape* depends on the order epochs arrived, its end point for SHA/Hyperband does not).
``acc_gap_pt`` = 100 x (grid best - the method's selected val acc); ``epochs_fraction`` = its
trial-epochs / the grid's. Target: gap <= 0.5 pt with <= 1/3 of the epochs.

    python benchmarks/asha_efficiency.py --json benchmarks/results/asha_efficiency_e8.json
    python benchmarks/asha_efficiency.py --epochs 16 --json benchmarks/results/asha_efficiency_e16.json
    python benchmarks/asha_efficiency.py --methods optuna+sha   # the grid (the reference) and one method
    python benchmarks/asha_efficiency.py --seeds 0 1 2 --methods optuna+sha optuna+hyperband

With ``--seeds`` the whole comparison (grid included: the seed also seeds the trainings) is repeated
per seed, and ``seeds_summary`` gives each method's gap and epoch fraction per seed, their median,
and in how many seeds it met the target: on a 180-image validation set one seed's pick is one draw.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import bench_common as bc
import numpy as np
from ray import tune

METHODS = ("optuna+asha", "optuna+sha", "optuna+hyperband", "random", "optuna")
STOPPING = {"optuna+asha": "asha", "optuna+sha": "sha", "optuna+hyperband": "hyperband"}
BATCHED = ("optuna+sha", "optuna+hyperband")  # the synchronous schedulers take sptune's batched TPE


class EpochRecorder(tune.Callback):
    """Every epoch result in the order the driver received it (the compute actually spent)."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        self.events.append({"trial": trial.trial_id, "epoch": int(result.get("training_iteration", 0)),
                            "val_acc": float(result.get("val_acc", float("nan"))), "time": time.time()})


def method_spec(base: dict[str, Any], method: str, args: argparse.Namespace, samples: int) -> Any:
    """The spec for one method: scratch only, its own search space, scheduler and searcher."""
    from sptune.spec import from_dict

    data = bc.only_variants(copy.deepcopy(base), ["scratch"])
    lrs = [float(v) for v in np.geomspace(args.lr_low, args.lr_high, args.n_lrs)]
    if method == "grid":
        search = {"lr": {"type": "grid", "values": lrs}, "batch_size": {"type": "grid", "values": args.batches}}
    else:
        search = {"lr": {"type": "loguniform", "low": args.lr_low, "high": args.lr_high},
                  "batch_size": {"type": "choice", "values": args.batches}}
    data["variants"]["scratch"] = {"search": search, "num_samples": samples, "epochs": args.epochs}
    data["finetune"] = {**data.get("finetune", {}), "epochs": args.epochs}
    # The arms measured before sptune had a batched mode keep telling Optuna results as trials finish.
    data["searcher"] = {"type": "random" if method == "random" else "optuna",
                        "mode": "batched" if method in BATCHED else "async", "multivariate": args.multivariate}
    data["scheduler"] = ({"type": STOPPING[method], "grace_period": args.grace, "reduction_factor": args.reduction}
                         if method in STOPPING else {"type": "fifo"})
    data["resources"] = {"cpu": 1, "gpu": 0}
    # The benchmark scores the search's own pick (select_best), so no seed-robust selection re-trains candidates.
    data.pop("selection", None)
    return from_dict(data)


def run_method(method: str, spec: Any, task: Any, storage: Path) -> dict[str, Any]:
    from sptune.judging.selection import select_best
    from sptune.judging.stage_graph import Stage
    from sptune.plan.study_plan import build_plan
    from sptune.tuning.tuner import build_study_tuner, staged_search

    plan = build_plan(spec, task.info, cluster_cpus=2)
    search = plan.variant_searches()[0]
    recorder = EpochRecorder()
    searcher, scheduler = staged_search(plan, [Stage(search)], {}, {})
    tuner = build_study_tuner(plan, task, searcher, scheduler, str(storage / method.replace("+", "_")), [recorder])
    print(f"[{method}] {search.n_trials} trials x <= {search.epochs} epochs ({search.searcher}, "
          f"{spec.scheduler.type}) ...", flush=True)
    start = time.perf_counter()
    grid = tuner.fit()
    wall = time.perf_counter() - start
    sel = select_best(grid, search)
    return {"trials": len(grid), "trial_epochs": sel.trial_epochs, "wall_s": wall,
            "selected_val_acc": sel.score, "selected_epoch": sel.epoch,
            "selected_config": {"lr": float(sel.config["lr"]), "batch_size": int(sel.config["batch_size"])},
            "curve": best_so_far(recorder.events), "trial_table": trial_table(grid),
            "val_acc_by_trial_epoch": per_trial(recorder.events)}


def per_trial(events: list[dict[str, Any]]) -> dict[str, list[float]]:
    """Each trial's validation accuracy per epoch (what ASHA saw at its rungs)."""
    out: dict[str, list[float]] = {}
    for e in events:
        out.setdefault(e["trial"], []).append(e["val_acc"])
    return out


def rung_diagnostics(grid_curves: dict[str, list[float]], grace: int) -> dict[str, Any]:
    """How well accuracy at ASHA's first rung predicts a grid trial's final best accuracy.

    Spearman rank correlation over the grid's trials, and the rank (1 = best) that the
    grid's eventual winner had at the rung, where ASHA keeps the top 1/reduction_factor.
    """
    curves = [c for c in grid_curves.values() if len(c) >= grace]
    at_rung = np.array([c[grace - 1] for c in curves])
    final = np.array([max(c) for c in curves])
    rank = lambda a: np.argsort(np.argsort(-a))  # noqa: E731  (0 = best; ties broken by order)
    rho = float(np.corrcoef(rank(at_rung), rank(final))[0, 1]) if len(curves) > 2 else float("nan")
    winner = int(np.argmax(final))
    return {"grace_epoch": grace, "spearman_rung_vs_final": rho, "trials": len(curves),
            "winner_rank_at_rung": int(rank(at_rung)[winner]) + 1,
            "val_acc_at_rung": sorted(at_rung.tolist(), reverse=True)}


def best_so_far(events: list[dict[str, Any]]) -> list[tuple[int, float]]:
    """(trial-epochs spent, best validation accuracy seen so far) after every epoch result."""
    best, curve = -math.inf, []
    for i, e in enumerate(events, start=1):
        if e["val_acc"] == e["val_acc"]:  # NaN from a diverged trial never counts
            best = max(best, e["val_acc"])
        curve.append((i, best))
    return curve


def trial_table(grid: Any) -> list[dict[str, Any]]:
    rows = []
    for r in grid:
        m = r.metrics or {}
        rows.append({"lr": float(r.config["lr"]), "batch_size": int(r.config["batch_size"]),
                     "epochs": int(m.get("training_iteration", 0)), "best_val_acc": m.get("best_val_acc")})
    return sorted(rows, key=lambda row: (row["batch_size"], row["lr"]))


def at_budget(curve: list[tuple[int, float]], budget: int) -> float | None:
    """Best accuracy found within `budget` trial-epochs (None if the method never spent that much)."""
    if not curve or curve[-1][0] < budget:
        return None
    return max((acc for spent, acc in curve if spent <= budget), default=None)


def budget_trials(args: argparse.Namespace, grid_epochs: int) -> dict[str, int]:
    """Trials per method so that each spends at most the budget, by construction (not by tuning)."""
    from sptune.rules.rungs import hyperband_brackets, planned_epochs

    budget = args.budget_fraction * grid_epochs + 1e-9

    def most(kind: str) -> int:
        # Hyperband needs a trial per bracket (the spec refuses fewer), whatever that costs.
        n = len(hyperband_brackets(args.grace, args.reduction, args.epochs)) if kind == "hyperband" else 1
        while planned_epochs(kind, n + 1, args.grace, args.reduction, args.epochs) <= budget:
            n += 1
        return n

    sha = most("sha")
    full = max(1, int(budget // args.epochs))
    return {"optuna+asha": args.asha_samples or sha, "optuna+sha": sha, "optuna+hyperband": most("hyperband"),
            "random": full, "optuna": full}


def earlier_methods(args: argparse.Namespace) -> dict[str, Any]:
    """The methods a run with the same settings already measured (--continue-from), grid included."""
    if args.continue_from is None:
        return {}
    earlier = json.loads(args.continue_from.read_text())
    same = ("spec", "overrides", "epochs", "n_lrs", "lr_low", "lr_high", "batches", "grace", "reduction",
            "budget_fraction", "asha_samples")
    differ = [k for k in same if earlier["args"].get(k) != vars(args)[k]]
    if differ:
        raise SystemExit(f"{args.continue_from} was measured with other settings: {', '.join(differ)}")
    return earlier["methods"]


def run_all(args: argparse.Namespace, storage: Path, seed: int | None = None) -> dict[str, Any]:
    """Every method at one seed (the spec's unless given): the searchers' and the trainings' seed."""
    base = bc.spec_dict(args.spec, args.overrides)
    if seed is not None:
        base["seed"] = seed
    first = method_spec(base, "grid", args, 1)
    task = bc.load_data(first, args.data_dir)
    results = earlier_methods(args)
    if "grid" not in results:
        results["grid"] = run_method("grid", first, task, storage)
    trials = budget_trials(args, results["grid"]["trial_epochs"])
    for method in [m for m in METHODS if m in args.methods and m not in results]:
        results[method] = run_method(method, method_spec(base, method, args, trials[method]), task, storage)
    results = {m: results[m] for m in ("grid", *METHODS) if m in results}  # one order in tables and plots
    return {"task": task.info.name, "train_rows": len(task.train), "val_rows": len(task.val),
            "budget_epochs": args.budget_fraction * results["grid"]["trial_epochs"], "trials": trials,
            "methods": results}


def summarize(out: dict[str, Any], grace: int) -> dict[str, Any]:
    """Headline numbers for SHA (sptune's default) when it ran, else Hyperband, else ASHA; all per method."""
    m = out["methods"]
    grid = m["grid"]
    gaps = {k: 100 * (grid["selected_val_acc"] - v["selected_val_acc"]) for k, v in m.items() if k != "grid"}
    fractions = {k: v["trial_epochs"] / grid["trial_epochs"] for k, v in m.items() if k != "grid"}
    met = {k: gaps[k] <= 0.5 and fractions[k] <= 1 / 3 + 1e-9 for k in STOPPING if k in m}
    head = next((k for k in ("optuna+sha", "optuna+hyperband", "optuna+asha") if k in m), None)
    return {"headline_method": head, "acc_gap_pt": gaps.get(head), "epochs_fraction": fractions.get(head),
            "gap_pt_by_method": gaps, "epochs_fraction_by_method": fractions,
            "one_val_example_pt": 100 / out["val_rows"],
            "target_met": met.get(head), "target_met_by_method": met,
            "grid_best_val_acc": grid["selected_val_acc"],
            "selected_val_acc_by_method": {k: v["selected_val_acc"] for k, v in m.items()},
            "rung": rung_diagnostics(grid["val_acc_by_trial_epoch"], grace)}


def seeds_summary(by_seed: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """Each method's gap and epoch fraction in every seed, their medians, and the seeds meeting the target."""
    methods = [k for k in next(iter(by_seed.values()))["summary"]["gap_pt_by_method"]]
    out: dict[str, Any] = {}
    for k in methods:
        gaps = [run["summary"]["gap_pt_by_method"][k] for run in by_seed.values()]
        fractions = [run["summary"]["epochs_fraction_by_method"][k] for run in by_seed.values()]
        met = [run["summary"]["target_met_by_method"].get(k) for run in by_seed.values()]
        out[k] = {"gap_pt": gaps, "epochs_fraction": fractions, "median_gap_pt": float(np.median(gaps)),
                  "max_epochs_fraction": max(fractions),
                  "seeds_meeting_target": None if None in met else sum(met), "seeds": len(gaps)}
    return out


def print_seeds(by_seed: dict[int, dict[str, Any]], summary: dict[str, Any]) -> None:
    seeds = list(by_seed)
    rows = [(k, *(f"{g:.2f}" for g in v["gap_pt"]), f"{v['median_gap_pt']:.2f}", f"{v['max_epochs_fraction']:.3f}",
             "-" if v["seeds_meeting_target"] is None else f"{v['seeds_meeting_target']}/{v['seeds']}")
            for k, v in summary.items()]
    print("\nacc_gap_pt per seed (grid best - the method's pick, in points):")
    bc.print_table(["method", *(f"seed {s}" for s in seeds), "median", "max epochs fraction", "target met"], rows)


def print_report(out: dict[str, Any], epochs: int) -> None:
    m = out["methods"]
    rows = [(k, v["trials"], v["trial_epochs"], v["wall_s"], f"{100 * v['selected_val_acc']:.2f}",
             f"{v['selected_config']['lr']:.3g}/{v['selected_config']['batch_size']}", v["selected_epoch"])
            for k, v in m.items()]
    bc.print_table(["method", "trials", "trial-epochs", "wall s", "val acc %", "lr/batch", "epoch"], rows)
    budgets = list(range(epochs, m["grid"]["trial_epochs"] + 1, epochs))
    print("\nbest val acc (%) found within N trial-epochs:")
    curve_rows = []
    for b in budgets:
        cells = [at_budget(v["curve"], b) for v in m.values()]
        curve_rows.append([b, *("-" if c is None else f"{100 * c:.2f}" for c in cells)])
    bc.print_table(["N", *m.keys()], curve_rows)
    s = out["summary"]
    for k, gap in s["gap_pt_by_method"].items():
        print(f"\n{k}: acc_gap_pt={gap:.2f} (1 val example = {s['one_val_example_pt']:.2f} pt)  "
              f"epochs_fraction={s['epochs_fraction_by_method'][k]:.3f}  "
              f"target met: {s['target_met_by_method'].get(k, '-')}", end="")
    print()
    r = s["rung"]
    print(f"grid trials: accuracy at epoch {r['grace_epoch']} (ASHA's first rung) vs final best, Spearman "
          f"{r['spearman_rung_vs_final']:.2f}; the grid's winner ranked {r['winner_rank_at_rung']}/{r['trials']} "
          "at that rung")


def plot_curves(out: dict[str, Any], path: Path) -> None:
    """Best validation accuracy found vs trial-epochs spent, one line per method; the budget dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for method, r in out["methods"].items():
        spent = [0, *(x for x, _ in r["curve"])]
        best = [float("nan"), *(100 * y if y > -math.inf else float("nan") for _, y in r["curve"])]
        ax.step(spent, best, where="post", label=f"{method} ({100 * r['selected_val_acc']:.2f} %)")
    budget = f"budget ({out['args']['budget_fraction']:.3g} of the grid)"
    ax.axvline(out["budget_epochs"], color="gray", linestyle="--", linewidth=1, label=budget)
    grid_best = 100 * out["methods"]["grid"]["selected_val_acc"]
    ax.axhline(grid_best - 0.5, color="gray", linestyle=":", linewidth=1, label="grid best - 0.5 pt")
    ax.set(xlabel="trial-epochs spent", ylabel="best validation accuracy found (%)",
           title=f"{out['task']}, {out['args']['epochs']} epochs per trial")
    ax.set_ylim(max(0, grid_best - 25), 100)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default=str(bc.SPECS / "digits_quick.yaml"))
    ap.add_argument("--set", dest="overrides", action="append", default=[], help="spec overrides (task, model)")
    ap.add_argument("--data-dir")
    ap.add_argument("--epochs", type=int, default=8, help="full length of every trial")
    ap.add_argument("--n-lrs", type=int, default=6)
    ap.add_argument("--lr-low", type=float, default=1e-4)
    ap.add_argument("--lr-high", type=float, default=1e-2)
    ap.add_argument("--batches", type=int, nargs="+", default=[32, 64])
    ap.add_argument("--budget-fraction", type=float, default=1 / 3, help="of the grid's trial-epochs")
    ap.add_argument("--asha-samples", type=int, help="ASHA's trials (default: as many as SHA gets)")
    ap.add_argument("--grace", type=int, default=2)
    ap.add_argument("--reduction", type=float, default=3.0)
    ap.add_argument("--methods", nargs="*", default=list(METHODS), choices=METHODS,
                    help="which methods run beside the grid (the reference); none: the grid only")
    ap.add_argument("--multivariate", action="store_true", help="searcher.multivariate: true for every Optuna method")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--continue-from", type=Path,
                    help="a JSON of an earlier run with the same settings: its methods (grid included) are kept, "
                         "the missing ones run (so one setting can be measured in two runs of < 10 min each)")
    ap.add_argument("--png", type=Path, help="the curves (default: the --json path with .png)")
    ap.add_argument("--seeds", type=int, nargs="+",
                    help="repeat the whole comparison per seed (default: once, at the spec's seed)")
    args = ap.parse_args()
    if args.seeds and len(args.seeds) > 1 and args.continue_from:
        raise SystemExit("--continue-from keeps one run's methods; use it with one seed at a time")
    bc.quiet_env()
    skip = ("json", "png", "continue_from", "methods")
    info = {"machine": bc.machine(), "args": {k: v for k, v in vars(args).items() if k not in skip}}
    seeds = args.seeds or [None]
    by_seed = {}
    bc.start_ray(2)
    try:
        for seed in seeds:
            with bc.temp_dir("asha") as tmp:
                run = {**info, **run_all(args, Path(tmp), seed)}
            run["summary"] = summarize(run, args.grace)
            run.update({k: run["summary"][k] for k in ("acc_gap_pt", "epochs_fraction")})
            print(f"\n=== seed {seed if seed is not None else 'of the spec'} ===")
            print_report(run, args.epochs)
            by_seed[seed] = run
    finally:
        bc.stop_ray()
    if len(seeds) == 1:
        out = by_seed[seeds[0]]
    else:
        out = {**info, "by_seed": by_seed, "seeds_summary": seeds_summary(by_seed)}
        print_seeds(by_seed, out["seeds_summary"])
    bc.write_json(args.json, out)
    png = args.png or (args.json.with_suffix(".png") if args.json else None)
    if png is not None:
        for seed, run in by_seed.items():
            plot_curves(run, png if len(seeds) == 1 else png.with_name(f"{png.stem}-seed{seed}{png.suffix}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
