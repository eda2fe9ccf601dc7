"""Check the Python environment a device call runs in: every sptune module and the libraries' parts it reaches
import (--imports), and every bundled wheel's requirements are met by what is installed (--requirements).

Run on the device after the bundle's install (call A), before the sweep (call B), and in the CPU rehearsal's venv,
where a module the bundle lacks fails the first check and names itself.

    PYTHONPATH=/tmp/site:. python3 tools/device/check_env.py --imports --requirements .device/bundle/bundle.json
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import platform
import sys
from collections.abc import Callable, Collection
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

# Reached at run time but not by importing sptune's modules: Tune's trainable and searcher parts, the SQLite
# stores MLflow and Optuna create on first use, and their schema migrations.
LIBRARY_MODULES = ("ray.tune", "ray.tune.search.optuna", "ray.tune.schedulers", "ray.train", "ray.air",
                   "mlflow.store.tracking.sqlalchemy_store", "mlflow.store.db.utils", "alembic.command",
                   "optuna.storages", "sqlalchemy.dialects.sqlite", "matplotlib.pyplot", "scipy.special")
# Optional: only with an extra installed or hub data asked for (never on the device's path).
OPTIONAL = {"flash_attn", "transformers", "datasets"}


def sptune_modules() -> list[str]:
    import sptune

    return sorted(m.name for m in pkgutil.walk_packages(sptune.__path__, "sptune."))


def check_imports() -> list[str]:
    """'module: error' for each module that fails to import; a missing optional library is no failure."""
    failed = []
    for name in [*sptune_modules(), *LIBRARY_MODULES]:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name and e.name.split(".")[0] in OPTIONAL:
                continue
            failed.append(f"{name}: {type(e).__name__}: {e}")
        except Exception as e:  # noqa: BLE001 (any import-time error is a finding to report)
            failed.append(f"{name}: {type(e).__name__}: {e}")
    return failed


# A version `unmet` takes as meeting any specifier: a package known to be installed at an unknown version.
ANY_VERSION = "any"


def unmet(requires: dict[str, list[str]], have: Callable[[str], str | None], skipped: Collection[str],
          python_version: str) -> list[str]:
    """'package: requirement (installed: version)' for each requirement of each package (`requires`: name → its
    metadata's Requires-Dist lines) that `have` (name → installed version, None: absent) misses, but for those
    the bundle leaves out on purpose (`skipped`: never imported on sptune's path)."""
    env = {"python_version": python_version, "extra": ""}
    found = []
    for package, texts in requires.items():
        for text in texts:
            req = Requirement(text)
            if (req.marker and not req.marker.evaluate(env)) or canonicalize_name(req.name) in skipped:
                continue
            version = have(canonicalize_name(req.name))
            met = version is not None and (version == ANY_VERSION or not req.specifier
                                           or req.specifier.contains(Version(version), prereleases=True))
            if not met:
                found.append(f"{package}: {req} (installed: {version or 'none'})")
    return found


def installed_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def unmet_requirements(bundle_json: Path) -> list[str]:
    """`unmet` for each bundled wheel's requirements against this environment's installed packages."""
    manifest = json.loads(bundle_json.read_text())
    requires = {p["name"]: metadata.requires(p["name"]) or [] for p in manifest["packages"]}
    return unmet(requires, installed_version, manifest["skipped"], ".".join(platform.python_version_tuple()[:2]))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--imports", action="store_true")
    ap.add_argument("--requirements", type=Path, metavar="BUNDLE_JSON")
    args = ap.parse_args(argv)
    problems = []
    if args.imports:
        failed = check_imports()
        print(f"imports: {len(sptune_modules())} sptune modules and {len(LIBRARY_MODULES)} library modules, "
              f"{len(failed)} failed" + "".join(f"\n  {f}" for f in failed))
        problems += failed
    if args.requirements:
        unmet = unmet_requirements(args.requirements)
        print(f"requirements of the bundle's wheels: {len(unmet)} unmet" + "".join(f"\n  {u}" for u in unmet))
        problems += unmet
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
