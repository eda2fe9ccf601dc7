"""sptune installed like a library: a wheel built from this checkout (not an editable install), installed into a
fresh venv and run from another directory, finds everything it reads (the report's template and stylesheet, the
dry run's epoch table) inside the package. The venv sees the packages of the environment the tests run in (torch,
Ray, MLflow are not installed again), whether that is the system's interpreter or a virtualenv of its own, but
imports sptune from the wheel: PYTHONPATH is unset and sptune.__file__ is checked."""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # builds a wheel and a venv: ~15 s

REPO = Path(__file__).resolve().parent.parent
FIXTURE_RUN = REPO / "tests" / "fixtures" / "digits_tiny_run"
# What the wheel's build reads; copied so that building leaves no build/ or egg-info folder in the checkout.
BUILD_INPUTS = ("pyproject.toml", "README.md", "sptune")


def _run(cmd: list[str], cwd: Path, env: dict[str, str], timeout: int = 300) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(map(str, cmd))} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> tuple[Path, dict[str, str], Path]:
    """(the venv's python, an environment without PYTHONPATH, a working directory outside the checkout)."""
    root = tmp_path_factory.mktemp("install")
    src, dist, venv, elsewhere = root / "src", root / "dist", root / "venv", root / "elsewhere"
    src.mkdir()
    for name in BUILD_INPUTS:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / name, src / name)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    # No build isolation: setuptools comes with the dev extra, and the build needs nothing from an index.
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(dist), str(src)],
         root, env)
    wheel = next(dist.glob("sptune-*.whl"))
    _run([sys.executable, "-m", "venv", str(venv)], root, env)
    python = venv / "bin" / "python"
    _see_running_packages(python, root, env)
    _run([str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], root, env)
    elsewhere.mkdir()
    env["SPTUNE_CACHE_DIR"] = str(root / "cache")
    return python, env, elsewhere


def _running_site_dirs() -> list[str]:
    """The site-packages this test process imports from: a virtualenv's own (and its base's where it was made with
    --system-site-packages), or the system interpreter's, and the user's site where it is on."""
    dirs = site.getsitepackages()
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return [d for d in dict.fromkeys(dirs) if Path(d).is_dir()]


def _see_running_packages(python: Path, cwd: Path, env: dict[str, str]) -> None:
    """Put the running environment's site-packages after the venv's own: `--system-site-packages` would give the
    base interpreter's instead, which lack everything when the tests run in a virtualenv. Plain paths, so the .pth
    files there (the checkout's editable sptune among them) are not run, and the venv's wheel comes first."""
    own = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd, env)
    (Path(own.stdout.strip()) / "running-environment.pth").write_text("\n".join(_running_site_dirs()) + "\n")


def test_the_wheel_holds_every_data_file_of_the_package(installed):
    python, env, cwd = installed
    where = _run([str(python), "-c", "import sptune; print(sptune.__file__)"], cwd, env).stdout.strip()
    package = Path(where).parent
    assert package.is_relative_to(python.parent.parent), f"sptune imported from {where}, not from the venv's wheel"
    tracked = subprocess.run(["git", "ls-files", "sptune"], cwd=REPO, capture_output=True, text=True, check=True)
    data = [Path(name).relative_to("sptune") for name in tracked.stdout.split() if not name.endswith(".py")]
    assert data, "the package holds data files (its epoch table, the report's template)"
    missing = [str(name) for name in data if not (package / name).is_file()]
    assert not missing, f"files of sptune/ the wheel lacks (add them to pyproject's package-data): {missing}"


def test_a_report_renders_from_the_installed_package(installed, tmp_path):
    python, env, cwd = installed
    run_dir = tmp_path / "run"
    shutil.copytree(FIXTURE_RUN, run_dir)
    out = tmp_path / "page" / "report.html"
    _run([str(python), "-m", "sptune.report", str(run_dir), "--out", str(out)], cwd, env)
    page = out.read_text()
    css = (REPO / "sptune" / "report" / "template" / "report.css").read_text()
    assert "<h2>Results</h2>" in page and css.strip() in page  # the packaged template, its stylesheet inlined
    assert "digits_quick" in page and (out.parent / "report.md").is_file()


def test_the_sweep_jobs_and_data_commands_run_from_the_installed_package(installed, tmp_path):
    python, env, cwd = installed
    spec = tmp_path / "spec.yaml"
    shutil.copy2(FIXTURE_RUN / "spec.yaml", spec)
    plan = _run([str(python), "-m", "sptune.sweep", str(spec), "--dry-run"], cwd, env).stdout
    assert "Total: 14 trials" in plan and "54 trial-epochs" in plan  # the plan, priced from the packaged epoch table
    info = _run([str(python), "-m", "sptune.data", "info", "digits"], cwd, env).stdout
    assert "'train': 1258" in info
    jobs = _run([str(python), "-m", "sptune.jobs", "--help"], cwd, env).stdout
    assert "submit" in jobs
