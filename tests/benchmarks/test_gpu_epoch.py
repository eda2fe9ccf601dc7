"""benchmarks/gpu_epoch.py runs on a machine without a GPU: it says there are no GPU numbers,
skips flash-attn and whole-step capture with the reason, and still times two concurrent trial processes and
(where the pack trainer imports) a pack of two (CPU, tiny)."""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.fixture
def gpu_epoch(repo_root, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(repo_root) / "benchmarks"))
    import gpu_epoch

    return gpu_epoch


def test_gpu_epoch_on_cpu_writes_extrapolated_json_and_says_no_gpu(tmp_path, repo_root, gpu_epoch):
    out = tmp_path / "gpu_epoch.json"
    cmd = [
        sys.executable,
        "benchmarks/gpu_epoch.py",
        "--synthetic",
        "--set",
        "task.resolution=16",
        "--pretrain-batch",
        "8",
        "--finetune-batch",
        "4",
        "--cpu-steps",
        "1",
        "--cpu-val-rows",
        "8",
        "--trials",
        "2",
        "--packs",
        "2",
        "--capture",
        "off,on",
        "--json",
        str(out),
    ]
    # benchmarks/ is sys.path[0] for the script: sptune comes from this checkout, installed or not.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [repo_root, os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(cmd, cwd=repo_root, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "GPU numbers not available" in proc.stdout
    result = json.loads(out.read_text())
    assert result["gpu_numbers"] is False and result["device"] == "cpu" and result["extrapolated"] is True
    assert result["skipped"] == {"flash": "no CUDA device here"}
    assert (result["train_rows"], result["val_rows"], result["seq_len"]) == (45_000, 5_000, 256)
    assert result["batch"] == {"spt": 8, "finetune": 4}
    for stage, batch in (("spt", 8), ("finetune", 4)):
        arm = result["arms"]["sdpa"]["2"][stage]
        assert [t["trial"] for t in arm["per_trial"]] == [0, 1]  # both processes reported
        assert all(t["batch"] == batch and t["steps"] == 45_000 // batch and t["epoch_s"] > 0 for t in arm["per_trial"])
        assert arm["epoch_s_max"] == max(t["epoch_s"] for t in arm["per_trial"])
        assert arm["rows_per_s"] == 2 * 50_000 / arm["epoch_s_max"]
        assert arm["gpu_busy"] is None and arm["vs_one_trial"] is None  # no GPU; no 1-trial arm to compare with
        slowest = max(t["train_s"] for t in arm["per_trial"])
        assert arm["ms_per_member_step"] == 1000 * slowest / (45_000 // batch) / 2  # two members share the time
    # Capture needs CUDA; the pack arm runs where the pack trainer imports, and says why not where it does not.
    assert {"2+capture", "pack2+capture"} <= set(result["skipped_arms"])
    assert "needs CUDA" in result["skipped_arms"]["pack2+capture"]
    if gpu_epoch.pack_unavailable() is None:
        pack = result["arms"]["sdpa"]["pack2"]["spt"]
        assert pack["layout"] == "pack" and pack["members"] == 2 and len(pack["per_trial"]) == 1
        assert pack["rows_per_s"] == 2 * 50_000 / pack["epoch_s_max"]
    else:
        assert result["skipped_arms"]["pack2"].startswith("pack trainer not available")
        assert "arm pack2: not measured (pack trainer not available" in proc.stdout


def test_gpu_epoch_imports_no_ray(repo_root):
    """A GPU box may have PyTorch but not Ray: every sptune module the script imports (at the top or inside its
    functions) is pure training/spec code, so `ray` never gets imported."""
    tree = ast.parse((Path(repo_root) / "benchmarks" / "gpu_epoch.py").read_text())
    modules = sorted({n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
                      and n.module.startswith("sptune")})
    assert "sptune.training.model_configs" in modules  # the trial's optimiser settings, as a trial gets them
    probe = "import sys, importlib\n" + "".join(f"importlib.import_module({m!r})\n" for m in modules) + \
        "print(sorted(m for m in sys.modules if m == 'ray' or m.startswith('ray.')))"
    done = subprocess.run([sys.executable, "-c", probe], cwd=repo_root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_gpu_busy_fraction_averages_the_samples_inside_the_measured_epochs(repo_root, monkeypatch):
    monkeypatch.syspath_prepend(str(Path(repo_root) / "benchmarks"))
    from gpu_epoch import busy_fraction

    samples = [(0.5, 1.0), (1.0, 0.2), (2.0, 0.6), (3.0, 1.0), (4.5, 1.0)]
    rows = [{"window": [1.0, 2.5]}, {"window": [1.5, 3.0]}]  # two trials: from the first start to the last end
    assert busy_fraction(samples, rows) == (0.2 + 0.6 + 1.0) / 3
    assert busy_fraction(samples, [{"epoch_s": 1.0}]) is None  # CPU arms have no window
    assert busy_fraction([], rows) is None  # no nvidia-smi


def test_arms_run_processes_then_packs_without_capture_then_with_it_and_skip_what_cannot_run(gpu_epoch):
    args = argparse.Namespace(capture="off,on", trial_counts=[1, 8], packs="1,8,16")
    arms, skipped = gpu_epoch.plan_layouts(args, ["sdpa"], cuda=True, pack_reason=None, pack_capture=None)
    assert [a.label for a in arms] == ["1", "8", "pack1", "pack8", "pack16",
                                       "1+capture", "8+capture", "pack1+capture", "pack8+capture", "pack16+capture"]
    assert [a.processes for a in arms[:5]] == [1, 8, 1, 1, 1] and skipped == {}
    arms, skipped = gpu_epoch.plan_layouts(args, ["sdpa"], cuda=True, pack_reason=None, pack_capture="eager only")
    assert [a.label for a in arms] == ["1", "8", "pack1", "pack8", "pack16", "1+capture", "8+capture"]
    assert skipped["pack16+capture"] == "eager only"
    arms, skipped = gpu_epoch.plan_layouts(args, ["sdpa"], cuda=False, pack_reason="no: x", pack_capture=None)
    assert [a.label for a in arms] == ["1", "8"]
    assert skipped["pack8"] == "no: x" and "needs CUDA" in skipped["8+capture"]


def test_a_packs_member_step_is_its_step_time_over_its_members_and_its_rows_count_every_member(gpu_epoch):
    row = {"trial": 0, "extrapolated": False, "batch": 32, "train_s": 8.0, "val_s": 2.0, "epoch_s": 10.0, "steps": 100}
    pack = gpu_epoch.summarise([row], [], gpu_epoch.Arm("sdpa", 8, pack=True))
    assert pack["ms_per_member_step"] == 1000 * 8.0 / 100 / 8 and pack["layout"] == "pack"
    alone = gpu_epoch.summarise([{**row, "epoch_s": 5.0}], [], gpu_epoch.Arm("sdpa", 1))
    arms = {"sdpa": {"1": {"spt": alone}, "pack8": {"spt": pack}}}
    table = gpu_epoch.throughput_table(arms, rows=1000)
    assert pack["rows_per_s"] == 8 * 1000 / 10.0 and pack["vs_one_trial"] == (8 * 1000 / 10.0) / (1000 / 5.0)
    assert [r[1] for r in table] == ["1", "pack8"]


def test_random_pixels_take_the_rows_the_spec_reads_and_the_kit_s_arms_ask_for_cifar_s_whole_split(gpu_epoch):
    from sptune.spec import load_spec

    spec = Path(__file__).resolve().parents[2] / "search_spaces" / "cifar_1layer_gpu.yaml"
    small = gpu_epoch.load_cifar(load_spec(spec, ["task.n_val=100", "task.max_train=300"]), None, synthetic=True)
    assert (len(small.train), len(small.val), small.train.x.shape[1]) == (300, 100, 1024)
    arms = (Path(__file__).resolve().parents[2] / "tools" / "device" / "gpu_epoch_arms.txt").read_text()
    lines = [line.split()[2:] for line in arms.splitlines() if line.strip() and not line.startswith(("#", "@"))]
    for args in lines:  # call B's spec trains on fewer rows: every arm times the 45,000 / 5,000 the table holds
        overrides = [args[i + 1] for i, flag in enumerate(args) if flag == "--set"]
        full = load_spec(spec, overrides).task.options
        assert (full["n_val"], full["max_train"]) == (5000, 45000), args


def test_a_captured_arm_loads_call_b_s_packed_spec_as_one_trial_s(gpu_epoch):
    # cifar_1layer_gpu.yaml packs 8 trials; an arm's process is one trial (a pack arm packs such trials itself).
    spec = Path(__file__).resolve().parents[2] / "search_spaces" / "cifar_1layer_gpu.yaml"
    args = argparse.Namespace(spec=str(spec), overrides=[], precision="bf16")
    captured = gpu_epoch.arm_spec(args, "sdpa", cuda=True, trials=8, capture=True)
    assert (captured.resources.pack, captured.training.compile, captured.resources.gpu) == (1, "cuda_graphs", 1 / 8)


def test_a_spec_asking_for_cuda_is_timed_on_the_cpu_where_there_is_none(gpu_epoch):
    assert gpu_epoch.cpu_fallback("cuda", cuda_available=False) == ["training.device=cpu", "training.precision=auto"]
    assert gpu_epoch.cpu_fallback("cuda", cuda_available=True) == []
    assert gpu_epoch.cpu_fallback("auto", cuda_available=False) == []


def test_the_json_is_written_after_every_arm_so_a_run_cut_short_keeps_the_arms_it_finished(
    tmp_path, gpu_epoch, monkeypatch
):
    out, ran = tmp_path / "gpu_epoch.json", []

    def one_arm(args, arm):  # the first arm measures; the call's timeout ends the run in the second
        ran.append(arm.label)
        if len(ran) == 2:
            raise KeyboardInterrupt
        return {"spt": {"epoch_s": 1.0}}

    monkeypatch.setattr(gpu_epoch, "run_arm", one_arm)
    argv = ["gpu_epoch.py", "--synthetic", "--set", "task.resolution=16", "--trials", "1,2", "--json", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(KeyboardInterrupt):
        gpu_epoch.main()
    result = json.loads(out.read_text())
    assert ran == ["1", "2"] and result["complete"] is False
    assert result["arms"] == {"sdpa": {"1": {"spt": {"epoch_s": 1.0}}}}
