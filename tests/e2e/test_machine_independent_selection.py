"""The same spec selects the same configs on any machine: the batched Optuna searcher's batch size is a spec
setting (`searcher.batch_size`), never the number of trials that fit at once.

One tiny study (two variants in one Tuner, 6 and 5 Optuna trials under synchronous halving) runs at
`resources.max_concurrent` 1 and 3 on the suite's 2-CPU Ray, at its default concurrency (2 CPUs /
0.4 CPU a trial = 5, above the batch size of 4) and on a Ray of 1 CPU (2 at a time; its own Ray in a
subprocess, as a caller who started Ray with `num_cpus=1` runs sptune, alongside the others). Each stage must
propose the same configs in the same order and select the same config and epoch. With a batch the size of the
concurrency TPE's proposals differ from the third trial on.

The study's pick is its search's (PLAIN): the stages after a search (LR extension, candidates) are given configs
that no batch size touches, and tests/rules/test_lr_extension.py and tests/judging/test_robust_selection.py
show them the same at any concurrency.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sptune.sweep import main
from tests.helpers_tiny import PLAIN, selected_rows, tiny_spec

TINY = [
    "--set", "pretrain.epochs=0",  # spt then starts from the untrained (seeded) encoder: no pretraining stage
    "--set", "finetune.epochs=2", "--set", "variants.scratch.num_samples=6", "--set", "variants.spt.num_samples=5",
    "--set", "variants.spt.search.lr.low=3.0e-4",  # its own space: the stages propose different configs
    "--set", "scheduler.type=sha", "--set", "scheduler.grace_period=1", "--set", "scheduler.reduction_factor=2",
    "--set", "searcher.mode=batched", "--set", "model.n_layers=1", "--set", "model.d_model=32",
    "--set", "model.d_ff=64", "--set", "rerun_seeds=1", "--set", "resources.cpu=0.4", *PLAIN,
]  # fmt: skip

# A caller's own Ray of one CPU: sptune runs on the Ray its process is connected to.
ONE_CPU_RAY = (
    "import sys, ray; ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False); "
    "from sptune.sweep import main; sys.exit(main(sys.argv[1:]))"
)
TRIAL_DIR = re.compile(r"^StudyTrainable_[0-9a-f]+_(\d+)_")


def proposals(out: Path) -> dict[str, list[tuple]]:
    """stage -> its trials' (lr, batch_size) in the order the Tuner created them."""
    found: dict[str, list[tuple[int, tuple]]] = {}
    for params in (out / "ray_results" / "study").glob("*/params.json"):
        index = int(TRIAL_DIR.match(params.parent.name).group(1))
        p = json.loads(params.read_text())
        found.setdefault(p["stage"], []).append((index, (round(p["lr"], 12), p["batch_size"])))
    return {stage: [config for _, config in sorted(trials)] for stage, trials in found.items()}


def outcome(out: Path) -> dict:
    results = json.loads((out / "results.json").read_text())
    return {"proposals": proposals(out), "selected": selected_rows(results)}


def in_process(spec: str, out: Path, *extra: str) -> dict:
    assert main([spec, "--output", str(out), *TINY, *extra]) == 0
    return outcome(out)


def start_on_one_cpu_ray(spec: str, out: Path, repo_root: str) -> subprocess.Popen:
    """The study on a Ray of its own with one CPU, in a subprocess that runs while the in-process studies do (in
    its own session: killed with the Ray it starts if the test ends first). It prints to files beside `out`."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(PYTHONPATH=repo_root, SPTUNE_PROGRESS_SECONDS="off")
    cmd = [sys.executable, "-c", ONE_CPU_RAY, spec, "--output", str(out), *TINY]
    with open(f"{out}.out", "w") as stdout, open(f"{out}.err", "w") as stderr:
        return subprocess.Popen(cmd, env=env, stdout=stdout, stderr=stderr, cwd=out.parent, start_new_session=True)


def finish_on_one_cpu_ray(proc: subprocess.Popen, out: Path) -> dict:
    proc.wait(timeout=600)
    printed = Path(f"{out}.out").read_text()
    assert proc.returncode == 0, printed[-2000:] + Path(f"{out}.err").read_text()[-3000:]
    assert "up to 2 concurrent trials" in printed  # the plan counted the caller's one CPU
    return outcome(out)


@pytest.mark.slow
@pytest.mark.heavy  # three studies on different concurrency and CPUs
def test_selections_do_not_depend_on_concurrency_or_cpus(ray_session, repo_root, tmp_path, monkeypatch):
    monkeypatch.setenv("SPTUNE_PROGRESS_SECONDS", "off")
    spec = tiny_spec(repo_root)
    one_cpu = start_on_one_cpu_ray(spec, tmp_path / "one_cpu", repo_root)
    try:
        runs = {f"max_concurrent {n}": in_process(spec, tmp_path / f"mc{n}", "--set", f"resources.max_concurrent={n}")
                for n in (1, 3)}  # 2 at a time: the 1-CPU Ray's
        runs["2-CPU Ray (5 at a time)"] = in_process(spec, tmp_path / "two_cpus")
        runs["1-CPU Ray (2 at a time)"] = finish_on_one_cpu_ray(one_cpu, tmp_path / "one_cpu")
    finally:
        if one_cpu.poll() is None:
            os.killpg(one_cpu.pid, signal.SIGKILL)
            one_cpu.wait()
    reference = runs["max_concurrent 1"]
    assert [len(reference["proposals"][s]) for s in ("search-scratch", "search-spt")] == [6, 5]
    for name, run in runs.items():
        print(f"\n{name}: selected {run['selected']}")
        assert run["proposals"] == reference["proposals"], name  # same configs, same order, per stage
        assert run["selected"] == reference["selected"], name
