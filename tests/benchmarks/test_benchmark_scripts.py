"""Every script in benchmarks/ runs, at its smallest arguments, so a broken benchmark fails the suite rather than the
next person who measures with it. The scripts are found by globbing: a new one without a row in SMOKE_ARGS fails
here until its smallest arguments are added. Each writes its JSON into the test's temporary folder, never into
benchmarks/results/."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # most scripts start Ray and run a real Tuner or study

# Each of the rest starts Ray and a whole study or several Tuners (one to several minutes even at smoke size: together
# they would double CI's time), so they are heavy (tests/conftest.py: SPTUNE_HEAVY=1 runs them).
EVERY_RUN = {"cache_hashing.py", "pack_ops.py", "step_profile.py", "throughput.py"}

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"
NOT_BENCHMARKS = {"bench_common.py"}  # helpers the scripts import
# Scripts a test of their own already runs at smoke size (the CPU path of a GPU benchmark).
RUN_ELSEWHERE = {"gpu_epoch.py": "tests/benchmarks/test_gpu_epoch.py runs its CPU path and checks its JSON"}
# script -> its smallest arguments ("{tmp}" is the test's temporary folder; --json {tmp}/out.json is added).
SMOKE_ARGS: dict[str, list[str]] = {
    "asha_efficiency.py": ["--epochs", "1", "--grace", "1", "--n-lrs", "2", "--batches", "32", "--methods", "random",
                           "--png", "{tmp}/curves.png"],
    "cache_hashing.py": ["--listops-mb", "1", "--reviews", "200"],
    "driver_scale.py": ["--trials", "2", "--epochs", "2", "--variants", "1", "--arms", "none", "--target", "0"],
    "memory.py": ["--tasks", "listops", "--modes", "after", "--concurrency", "1", "--listops-train", "64"],
    "mlflow_writes.py": ["--trials", "2", "--epochs", "2", "--concurrency", "1"],
    "pack_ops.py": ["--quick"],
    "spt_reuse.py": ["--epochs", "1", "--pretrain-trials", "1", "--trials", "1"],
    "step_profile.py": ["--top", "2", "--configs", "digits"],
    "study_start.py": ["--arm", "here=", "--rounds", "1"],
    "study_timeline.py": ["--epochs", "1", "--pretrain-trials", "1", "--trials", "1"],
    "sweep_overhead.py": ["--epochs", "1", "--pretrain-trials", "1", "--trials", "1"],
    "throughput.py": ["--threads", "1", "--seq-lens", "64", "--seq-steps", "1", "--sizes", "32", "--skip", "flops",
                      "layouts"],
    "trial_overhead.py": ["--epochs", "1", "--repeats", "1"],
    "tune_fixed_costs.py": ["--repeats", "1", "--steps", "2", "--trials", "2", "--tuners", "1"],
}
SCRIPTS = sorted(p.name for p in BENCHMARKS.glob("*.py") if p.name not in NOT_BENCHMARKS)


def test_every_benchmark_script_has_its_smallest_arguments_here():
    missing = [name for name in SCRIPTS if name not in SMOKE_ARGS and name not in RUN_ELSEWHERE]
    assert not missing, (
        f"benchmarks/{', benchmarks/'.join(missing)} has no smoke-size arguments: add its smallest arguments (seconds "
        f"of work) to SMOKE_ARGS in {Path(__file__).relative_to(REPO)}"
    )
    gone = sorted((set(SMOKE_ARGS) | set(RUN_ELSEWHERE)) - set(SCRIPTS))
    assert not gone, f"SMOKE_ARGS names scripts benchmarks/ no longer has: {gone}"


def _smoke(name: str):
    return pytest.param(name, marks=() if name in EVERY_RUN else pytest.mark.heavy)


@pytest.mark.parametrize("name", [_smoke(n) for n in SCRIPTS if n in SMOKE_ARGS])
def test_the_benchmark_runs_at_its_smallest_arguments(name, tmp_path):
    argv = [arg.replace("{tmp}", str(tmp_path)) for arg in SMOKE_ARGS[name]]
    out = tmp_path / "out.json"
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_USAGE_STATS_ENABLED": "0"}
    done = subprocess.run([sys.executable, str(BENCHMARKS / name), *argv, "--json", str(out)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"benchmarks/{name} {' '.join(argv)} exited {done.returncode}:\n{done.stderr[-4000:]}"
    assert out.is_file() and out.stat().st_size > 2, f"benchmarks/{name} wrote no JSON to --json"
