"""The device kit's CPU rehearsal (BENCHMARKS.md §7): call B's script, run where only the bundle and the device
image's packages import, must get through sptune's CLI. A package the study needs that neither the bundle nor the
image holds fails it here, before a GPU call is spent finding out.

The bundle is built for this Python with the device bundle's pins (tools/device/bundle.py; wheels cached under the
git-ignored .device/), installed into a venv's own folder as call A installs it on the device, and the image's
packages, torch among them, are linked from this environment (tools/device/rehearsal_env.py). Call B's script then
runs with --toy: the same spec and code path on scikit-learn's digits, at a toy size (no LR extension round), on
the CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
PY = f"{sys.version_info.major}.{sys.version_info.minor}"
BUNDLE = REPO / ".device" / f"bundle{PY.replace('.', '')}"


def _run(cmd: list[str], env: dict[str, str] | None = None, timeout: int = 300, cwd: Path = REPO):
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    built = _run([sys.executable, "tools/device/bundle.py", "--python-version", PY, "--out", str(BUNDLE),
                  "--no-size-check"])
    assert built.returncode == 0, built.stderr[-3000:]
    venv = tmp_path_factory.mktemp("device") / "venv"
    made = _run([sys.executable, "tools/device/rehearsal_env.py", "--bundle", str(BUNDLE), "--venv", str(venv)])
    assert made.returncode == 0, made.stderr[-3000:]
    return venv


def _device_env(venv: Path, **extra: str) -> dict[str, str]:
    """This environment's variables without what would reach past the venv: no PYTHONPATH (call B's script sets
    the bundle's folder and the checkout), no user site, no Ray cluster to join."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RAY_ADDRESS", "VIRTUAL_ENV")}
    return {**env, "PYTHONNOUSERSITE": "1", "PYTHON": str(venv / "bin" / "python"), "SITE": str(venv / "site"),
            **extra}


def test_the_venv_imports_only_the_bundle_and_the_images_packages(venv: Path, tmp_path: Path):
    python = str(venv / "bin" / "python")
    bare = _device_env(venv)
    image = _run([python, "-c", "import numpy, yaml, torch, matplotlib, sklearn, pyarrow"], bare)
    assert image.returncode == 0, image.stderr  # the image's packages, linked
    for name in ("ray", "optuna", "mlflow", "sqlalchemy", "pydantic", "sptune"):  # this environment's: not seen
        hidden = _run([python, "-c", f"import {name}"], bare, cwd=tmp_path)  # not from the checkout either
        assert f"No module named '{name}'" in hidden.stderr, name
    on_site = {**bare, "PYTHONPATH": os.pathsep.join([str(venv / "site"), str(REPO)])}
    found = _run([python, "-c", "import ray, sptune; print(ray.__file__); print(sptune.__file__)"], on_site)
    assert found.stdout.split() == [str(venv / "site" / "ray" / "__init__.py"), str(REPO / "sptune" / "__init__.py")]
    stripped = _run([python, "-c", "import ray.rllib"], on_site)  # the repacked wheel, not another Ray
    assert "No module named 'ray.rllib'" in stripped.stderr


@pytest.mark.heavy  # the GPU kit's call B at CPU size: run before a GPU session
def test_call_b_runs_through_sptunes_cli_on_the_bundle_alone(venv: Path, tmp_path: Path):
    out, work = tmp_path / "out", tmp_path / "work"
    done = _run(["bash", "tools/device/call_b.sh", "--toy"], _device_env(venv, OUT=str(out), WORK=str(work)),
                timeout=480)
    log = (out / "call_b.log").read_text() if (out / "call_b.log").is_file() else done.stdout
    assert done.returncode == 0, log[-4000:]
    assert "imports: " in log and ", 0 failed" in log  # every sptune module and the libraries' parts it reaches
    assert "  pack-epochs: at most " in log  # call B's study is packed, and its dry run priced the packs
    sweep = log.split("sweep (limit")[-1]
    assert "Packs (resources.pack: 8)" in sweep and "refuse" not in sweep  # the study itself ran packed
    files = sorted(p.name for p in out.iterdir())
    assert len(files) <= 8 and {"call_b.log", "steps.json", "results.json", "results.md", "study.tar.gz"} <= set(files)
    steps = [s["step"] for s in json.loads((out / "steps.json").read_text())]
    assert steps[0] == "call B start (toy=1)" and "sweep done (exit 0)" in steps
    results = json.loads((out / "results.json").read_text())
    assert {row["variant"] for row in results["rows"]} == {"scratch", "spt", "qk_init"}
    pins = {p["name"]: p["version"] for p in json.loads((BUNDLE / "bundle.json").read_text())["packages"]}
    versions = results["provenance"]["versions"]  # recorded from the bundle: MLflow is mlflow-skinny there
    assert (versions["mlflow"], versions["ray"]) == (pins["mlflow-skinny"], pins["ray"])
