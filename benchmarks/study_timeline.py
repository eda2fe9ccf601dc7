"""Where a study's time goes outside its trials' training: Ray's own task timeline of one sweep.

`sweep_overhead.py` measures how much a study adds around its trials; this script says where. It runs
the same serial sweep (digits_quick, FIFO, 2 pretraining + 2 trials per variant, 3-seed re-runs, one
trial at a time) through `sptune.sweep.main` on an already started Ray, then reads `ray.timeline()`:
every actor method Ray ran (the trainable's `__init__`/setup, each epoch's `train`, `save`, `reset`,
`stop`) with its start and duration. torch, the training code and the data's library are imported
first, untimed, as in sweep_overhead.py. The study's wall is then split into

  before the first trial   spec, data, MLflow store, Ray Tune set-up (driver), up to the Tuner's first
                           step (the first stage's release, from results.json); then Ray starting
                           the trial actor's process
  actor methods            per method name: calls, seconds (epochs in `train` include Tune's wrapper)
  actor idle between methods, inside the trials' span (the driver's turn: Tune's loop, the searchers,
                           MLflow child runs, selection, snapshots)
  after the last trial     test evaluation, results, report.html (driver)

and each trial's training seconds (`time_total_s`, what sweep_overhead calls in-trial) are set against
its `train` calls, so what Tune's wrapper adds per epoch is visible too.

    python benchmarks/study_timeline.py --epochs 4 --json benchmarks/results/study_timeline.json
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path
from typing import Any

import bench_common as bc
from sweep_overhead import sweep_overrides, sweep_trials, warm_common_libraries


def run_study(spec_path: Path, out: Path, profile: Path | None) -> tuple[float, float, float, list[dict[str, Any]]]:
    """Run the sweep on a started Ray; return its start and end (epoch seconds), wall, and Ray's timeline.
    With `profile`, the driver's `main()` is cProfiled into that file (the actor is not: it is another process)."""
    import cProfile

    import ray

    from sptune.sweep import main

    bc.start_ray(2)
    try:
        profiler = cProfile.Profile() if profile else None
        start = time.time()
        code = profiler.runcall(main, [str(spec_path), "--output", str(out)]) if profiler else main(
            [str(spec_path), "--output", str(out)])
        end = time.time()
        if profiler:
            profiler.dump_stats(str(profile))
        events = ray.timeline()
    finally:
        bc.stop_ray()
    if code != 0:
        raise SystemExit(f"sptune sweep failed with exit status {code}")
    return start, end, end - start, events


def actor_spans(events: list[dict[str, Any]]) -> list[tuple[str, float, float]]:
    """(method, start s, end s) of every trainable method Ray executed, in start order. Ray's trace
    holds the whole task (category `task::Class.method`, name `method`) and its sub-phases
    (`task:execute`, ...): only the whole task is kept, so nothing is counted twice."""
    spans = []
    for e in events:
        category = str(e.get("cat", ""))
        if e.get("ph") != "X" or not category.startswith("task::") or "Trainable." not in category:
            continue
        start = float(e["ts"]) / 1e6
        spans.append((str(e["name"]), start, start + float(e["dur"]) / 1e6))
    return sorted(spans, key=lambda s: s[1])


def split_wall(start: float, end: float, spans: list[tuple[str, float, float]]) -> dict[str, Any]:
    """The study's wall, split into before / actor methods / actor idle / after (serial: one trial at a time)."""
    by_method: dict[str, dict[str, float]] = {}
    for method, s, e in spans:
        row = by_method.setdefault(method, {"calls": 0, "seconds": 0.0})
        row["calls"] += 1
        row["seconds"] += e - s
    busy, idle, last_end = 0.0, 0.0, spans[0][1]
    for _, s, e in spans:  # the union of the spans, and the gaps between them
        if s > last_end:
            idle += s - last_end
        busy += max(0.0, e - max(s, last_end))
        last_end = max(last_end, e)
    return {
        "wall_s": end - start,
        "before_first_trial_s": spans[0][1] - start,
        "actor_busy_s": busy,
        "actor_idle_between_s": idle,
        "after_last_trial_s": end - last_end,
        "by_method": dict(sorted(by_method.items(), key=lambda kv: -kv[1]["seconds"])),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", default=str(bc.SPECS / "digits_quick.yaml"))
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--pretrain-trials", type=int, default=2)
    ap.add_argument("--trials", type=int, default=2, help="finetune trials per variant")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--profile", type=Path, help="cProfile the driver's main() into this file")
    args = ap.parse_args()
    bc.quiet_env()
    from sptune.spec import apply_override

    data = bc.spec_dict(args.spec)
    edited = copy.deepcopy(data)
    for s in sweep_overrides(data, args.epochs, args.pretrain_trials, args.trials, concurrent=1):
        apply_override(edited, s)
    with bc.temp_dir("timeline") as tmp:
        spec_path = bc.write_spec(edited, Path(tmp))
        warm_common_libraries(edited, None)  # as sweep_overhead.py: what a plain PyTorch loop imports too
        start, end, wall, events = run_study(spec_path, Path(tmp) / "study", args.profile)
        _, in_trial = sweep_trials(Path(tmp) / "study")
        results = json.loads((Path(tmp) / "study" / "results.json").read_text())
    tuner_start = min(stage["start"] for stage in results["timeline"])  # the first stage's release
    spans = actor_spans(events)
    if not spans:
        from collections import Counter

        names = Counter((e.get("ph"), e.get("cat"), e.get("name")) for e in events).most_common(30)
        raise SystemExit(f"Ray's timeline held no trainable methods: nothing to split; it held {names}")
    split = split_wall(start, end, spans)
    # Split the time before the first trial at the Tuner's first step (the first stage's release):
    # the driver's own set-up before it, Ray starting the trial actor's process after it.
    split["driver_setup_s"] = tuner_start - start
    split["actor_start_s"] = spans[0][1] - tuner_start
    split["in_trial_s"] = sum(in_trial.values())  # time_total_s: inside the trainables' step() calls
    train = split["by_method"].get("train", {"seconds": 0.0, "calls": 0})
    split["train_wrapper_s_per_epoch"] = (train["seconds"] - split["in_trial_s"]) / max(1, train["calls"])
    out = {"machine": bc.machine(), "spec": args.spec, "epochs": args.epochs, **split}
    print(f"study wall {wall:.1f} s; in-trial (time_total_s) {split['in_trial_s']:.1f} s")
    rows = [("before the Tuner's first step (driver: spec, data, MLflow store, Tune set-up)", "",
             split["driver_setup_s"]),
            ("Tuner's first step to the actor's first method (Ray starts the actor's process)", "",
             split["actor_start_s"])]
    rows += [(f"actor: {m}", int(r["calls"]), r["seconds"]) for m, r in split["by_method"].items()]
    rows += [("actor idle between methods (driver's turn)", "", split["actor_idle_between_s"]),
             ("after the last trial (driver)", "", split["after_last_trial_s"])]
    bc.print_table(("where", "calls", "seconds"), [(w, c, f"{s:.2f}") for w, c, s in rows])
    print(f"Tune's train() wrapper beyond step(): {1000 * split['train_wrapper_s_per_epoch']:.1f} ms per epoch")
    bc.write_json(args.json, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
