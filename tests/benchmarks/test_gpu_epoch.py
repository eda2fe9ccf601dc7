"""benchmarks/gpu_epoch.py runs on a machine without a GPU: it says there are no GPU numbers,
skips flash-attn with the reason, and still times two concurrent trial processes (CPU, tiny)."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path


def test_gpu_epoch_on_cpu_writes_extrapolated_json_and_says_no_gpu(tmp_path, repo_root):
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
