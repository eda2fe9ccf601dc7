"""How long a study takes to start, code A vs code B, alternated in one run.

Runs the README's main job command (`python -m sptune.sweep SPEC --output DIR`, its own Ray start)
and reads its stdout as it comes: the seconds from the command to the preflight's end (Ray's token
warning, the first thing Ray prints), to Ray started, to the study's first line, and to the first
`== Status ==` (the Tuner running). Then it interrupts the study (Ctrl-C: sptune stops the Ray
it started) and runs the next arm. Arms alternate ABBA... over `--rounds`; medians are reported.

An arm is NAME=PATH: PATH goes first on PYTHONPATH (a git worktree of the code to compare), or
NAME= for the installed sptune.

    git worktree add /tmp/before <rev>
    python benchmarks/study_start.py --arm after= --arm before=/tmp/before --json benchmarks/results/study_start.json
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import bench_common as bc

REPO = Path(__file__).resolve().parent.parent
MARKS = {"preflight_done": "Token authentication", "ray_started": "Started a local Ray", "study_line": "Study '",
         "tuner_running": "== Status =="}


def start_once(pythonpath: str, spec: str, out: Path) -> dict[str, float]:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, env.get("PYTHONPATH")) if p)
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-u", "-m", "sptune.sweep", spec, "--output", str(out)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tempfile.gettempdir())
    marks: dict[str, float] = {}
    assert proc.stdout is not None
    for line in proc.stdout:
        for name, text in MARKS.items():
            if name not in marks and text in line:
                marks[name] = time.perf_counter() - start
        if "tuner_running" in marks:
            break
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=180)
    missing = set(MARKS) - set(marks)
    if missing:
        raise RuntimeError(f"the study's output never showed {sorted(missing)} (exit {proc.returncode})")
    return marks


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arm", action="append", required=True, help="NAME=PYTHONPATH (empty: the installed sptune)")
    ap.add_argument("--spec", default="search_spaces/digits_quick.yaml", help="relative to each arm's code")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    start = time.perf_counter()
    arms = dict(a.split("=", 1) for a in args.arm)
    out: dict[str, Any] = {"machine": bc.machine(), "arms": arms, "rounds": {name: [] for name in arms}}
    with tempfile.TemporaryDirectory(prefix="sptune-start-") as tmp:
        for r in range(args.rounds):
            for name in (list(arms) if r % 2 == 0 else list(arms)[::-1]):
                spec = str(Path(arms[name] or REPO) / args.spec)
                marks = start_once(arms[name], spec, Path(tmp) / name)
                shutil.rmtree(Path(tmp) / name, ignore_errors=True)
                out["rounds"][name].append(marks)
                print(r, name, {k: round(v, 2) for k, v in marks.items()}, flush=True)
                time.sleep(3)  # let the interrupted Ray's processes go before the next start
    out["medians"] = {name: {m: statistics.median(r[m] for r in rounds) for m in MARKS}
                      for name, rounds in out["rounds"].items()}
    bc.print_table(["arm", *MARKS], [[name, *med.values()] for name, med in out["medians"].items()])
    return bc.finish(args.json, out, start)


if __name__ == "__main__":
    sys.exit(main())
