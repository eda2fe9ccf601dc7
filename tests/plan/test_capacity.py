"""Trials at once: bounded by the CPU and GPU shares; this machine's GPUs counted as a local Ray counts them."""

from __future__ import annotations

from pathlib import Path

from sptune.plan.capacity import concurrency, local_gpus, visible_gpus
from sptune.plan.dry_run_text import describe
from sptune.plan.study_plan import build_plan
from sptune.spec import load_spec
from sptune.tasks.base import TaskInfo

BASE = Path(__file__).resolve().parents[2] / "search_spaces" / "digits_quick.yaml"


def _spec(*overrides: str):
    return load_spec(BASE, list(overrides))


def test_cuda_visible_devices_narrows_the_detected_gpus():
    assert visible_gpus(4, None) == 4
    assert visible_gpus(4, "0,2") == 2
    assert visible_gpus(1, "0,1,2") == 1  # never more than the machine has
    assert visible_gpus(4, "") == 0 and visible_gpus(4, "-1") == 0
    assert visible_gpus(4, "1,-1,2") == 1  # CUDA stops at the first invalid entry


def test_this_machine_hides_its_gpus_when_told_to(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert local_gpus() == 0


def test_concurrency_is_bounded_by_the_gpus_as_well_as_the_cpus():
    eighth = _spec("resources.cpu=1", "resources.gpu=0.125")
    # 16 cores and one GPU: Ray places 8 trials of 1/8 GPU, not the 16 the cores alone would hold.
    assert concurrency(eighth, cluster_cpus=16, cluster_gpus=1) == 8
    assert concurrency(eighth, cluster_cpus=16, cluster_gpus=2) == 16
    assert concurrency(eighth, cluster_cpus=4, cluster_gpus=2) == 4
    assert concurrency(_spec("resources.gpu=0.1"), cluster_cpus=64, cluster_gpus=0.3) == 3  # Ray's fixed point
    assert concurrency(_spec("resources.gpu=0.125", "resources.max_concurrent=3"), 16, 1) == 3
    assert concurrency(_spec("resources.gpu=0"), cluster_cpus=16, cluster_gpus=0) == 16  # CPU trials: GPUs irrelevant
    plan = build_plan(eighth, TaskInfo("digits", "continuous", 64, 10, levels=17), cluster_cpus=16, cluster_gpus=1)
    assert plan.concurrency == 8
    line = "1 CPU + 0.125 GPU per trial, up to 8 concurrent trials (as many as the CPUs and GPUs hold)"
    assert line in describe(plan)


def test_packed_trials_run_in_whole_packs():
    # A pack holds one trial's share: 2 CPUs hold 2 packs of 3 members; max_concurrent (trials) rounds down to packs.
    assert concurrency(_spec("resources.pack=3"), cluster_cpus=2) == 6
    assert concurrency(_spec("resources.pack=3", "resources.max_concurrent=5"), cluster_cpus=2) == 3
    assert concurrency(_spec("resources.pack=3", "resources.max_concurrent=6"), cluster_cpus=8) == 6
    one_gpu = _spec("resources.pack=8", "resources.gpu=1")
    assert concurrency(one_gpu, cluster_cpus=16, cluster_gpus=1) == 8  # one pack on the one GPU
    plan = build_plan(_spec("resources.pack=3"), TaskInfo("digits", "continuous", 64, 10, levels=17), cluster_cpus=2)
    assert ("1 CPU + 0 GPU per pack of 3 trials (each member trial reserves 1/3 of the CPUs), up to 6 concurrent "
            "trials") in describe(plan)
