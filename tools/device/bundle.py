"""Build the wheel bundle a device call carries: exactly what sptune needs that the device image lacks.

The device machine (Python 3.12, torch 2.11, no registry reachable) has no Ray, MLflow, Optuna, SQLAlchemy or
pydantic. This resolves sptune's run-time dependencies (pyproject.toml, with the substitutions and exclusions
below) through the requirements of the versions installed HERE, drops what the image holds
(image_packages.txt) unless the image's version is known to miss a requirement, downloads the rest pinned to the
local versions as manylinux wheels for the target Python, repacks Ray's wheel without the parts sptune never
imports and every compiled wheel without its binaries' symbol tables, checks the bundle fits a call beside the
checkout (carry.py) and records its size in bundle_size.json, which CI checks the checkout against
(tests/tools/test_device_bundle.py). The same pins for another Python (`--python-version 3.11`) give the CPU
rehearsal's bundle.

    python tools/device/bundle.py                                   # .device/bundle (cp312), size-checked
    python tools/device/bundle.py --python-version 3.11 --out .device/bundle311 --no-size-check
    python tools/device/bundle.py --list                            # the resolution only, nothing downloaded
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import carry
import tomllib
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
IMAGE_LIST = HERE / "image_packages.txt"
SIZE_RECORD = HERE / "bundle_size.json"  # the carried bundle's bytes, committed: CI adds the checkout to them

# mlflow's own wheel adds the tracking server and its web UI (25 MiB of JavaScript) to mlflow-skinny, which holds the
# whole `mlflow` package sptune imports (MlflowClient, the SQLite store and its migrations).
SWAPS = {"mlflow": "mlflow-skinny"}
# Dependencies that call B never needs: torch is the image's own (its CUDA build); datasets is imported only to
# fetch data from the Hugging Face hub, which the device cannot reach (call B carries the data).
EXCLUDED = {"torch": "the image's own CUDA build", "datasets": "hub downloads only; nothing is reachable there"}
# Imported on that path but declared by no requirement in the closure: mlflow-skinny's SQL store imports
# cryptography at module level (its model-registry tables); the full mlflow wheel declares it, skinny does not.
ADDED = {"cryptography": "mlflow-skinny's SQLite store imports it at module level without declaring it"}
# In the dependency closure, never imported on `python -m sptune.sweep`'s path (checked by the CPU rehearsal,
# which runs call B's script with only the bundle and the image's packages importable). databricks-sdk itself
# stays: MLflow probes for its `databricks` namespace at import.
SKIPPED = {
    "google-auth": "databricks-sdk's login to Databricks workspaces (with pyasn1); MLflow uses it for databricks://",
    "tensorboardx": "ray[tune]'s TensorBoard logger; Tune leaves it out when the package is absent",
}
# Ray's parts sptune never imports: Java jars, the dashboard's web client (no dashboard without ray[default]),
# RLlib, Serve, Ray LLM, workflows. (Ray Data stays: ray.tune imports it.)
RAY_STRIPPED = ("ray/jars/", "ray/dashboard/client/build/", "ray/rllib/", "ray/serve/", "ray/llm/", "ray/workflow/")
# Bumped when the way wheels are repacked changes, so that a bundle built the old way is rebuilt.
RECIPE = "compiled wheels stripped"
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64")


@dataclass
class Node:
    name: str  # canonical
    version: str
    needed_by: list[str] = field(default_factory=list)
    wanted: list[Requirement] = field(default_factory=list)  # what the closure asks of it (its specifiers)


def _image_lines(path: Path) -> list[str]:
    lines = (line.split("#")[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line]


def image_packages(path: Path = IMAGE_LIST) -> set[str]:
    return {canonicalize_name(line.split("==")[0]) for line in _image_lines(path)}


def image_versions(path: Path = IMAGE_LIST) -> dict[str, str]:
    """The image's versions where they are known (`name==version` lines, read on a device machine)."""
    pairs = (line.split("==", 1) for line in _image_lines(path) if "==" in line)
    return {canonicalize_name(name): version.strip() for name, version in pairs}


def too_old_on_image(node: Node, versions: dict[str, str]) -> bool:
    """The image holds the package at a known version that some requirement of the closure excludes."""
    have = versions.get(node.name)
    return have is not None and any(not r.specifier.contains(Version(have), prereleases=True) for r in node.wanted)


def roots(pyproject: Path = REPO / "pyproject.toml") -> list[Requirement]:
    """sptune's run-time dependencies, with SWAPS applied and EXCLUDED left out."""
    found = []
    for text in tomllib.loads(pyproject.read_text())["project"]["dependencies"]:
        req = Requirement(text)
        req.name = SWAPS.get(canonicalize_name(req.name), req.name)
        if canonicalize_name(req.name) not in EXCLUDED:
            found.append(req)
    return found + [Requirement(name) for name in ADDED]


def target_environment(python_version: str) -> dict[str, str]:
    env = default_environment()
    env.update(python_version=python_version, python_full_version=f"{python_version}.0", sys_platform="linux",
               platform_system="Linux", platform_machine="x86_64", implementation_name="cpython")
    return env


def _installed_version(name: str, parent: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        if name in SKIPPED:  # never bundled: it need not be installed here either
            return "not installed"
        raise SystemExit(f"{name} (needed by {parent}) is not installed here: install sptune's dependencies first "
                         "(pip install -e .); the bundle pins what is installed") from None


def closure(python_version: str, start: list[Requirement] | None = None) -> dict[str, Node]:
    """Every distribution the roots need on the target Python, at the versions installed here."""
    env, found = target_environment(python_version), {}
    stack = [(req, "sptune") for req in (start if start is not None else roots())]
    while stack:
        req, parent = stack.pop()
        name = canonicalize_name(req.name)
        node = found.get(name)
        if node is None:
            version = _installed_version(name, parent)
            node = found[name] = Node(name, version)
            for text in [] if name in SKIPPED else metadata.requires(name) or []:  # what it needs, it never asks
                dep = Requirement(text)
                if dep.marker is None or any(dep.marker.evaluate({**env, "extra": e}) for e in ("", *req.extras)):
                    stack.append((dep, name))
        elif req.extras and name not in SKIPPED:  # extras asked for later (ray, then ray[tune]) add their own
            for text in metadata.requires(name) or []:
                dep = Requirement(text)
                if dep.marker and any(dep.marker.evaluate({**env, "extra": e}) for e in req.extras):
                    stack.append((dep, name))
        node.needed_by.append(parent)
        node.wanted.append(req)
    return found


def partition(nodes: dict[str, Node], image: set[str], versions: dict[str, str] | None = None
              ) -> tuple[list[Node], list[Node], list[Node]]:
    """(bundled, on the image, skipped), each sorted by name. A package the image holds at a version the closure
    excludes (`versions`: the image's known ones) is bundled at the local version, which shadows the image's."""
    versions = {} if versions is None else versions
    used = {name for name, n in nodes.items() if name in image and not too_old_on_image(n, versions)}

    def pick(keep):
        return sorted((n for n in nodes.values() if keep(n.name)), key=lambda n: n.name)

    return (pick(lambda n: n not in used and n not in SKIPPED), pick(lambda n: n in used),
            pick(lambda n: n not in image and n in SKIPPED))


def download(pins: list[Node], python_version: str, cache: Path) -> dict[str, Path]:
    """pip download of each pin's wheel for the target (cached: pip skips a file already there)."""
    cache.mkdir(parents=True, exist_ok=True)
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version",
           python_version, "--implementation", "cp", *platforms, "-d", str(cache),
           *(f"{n.name}=={n.version}" for n in pins)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:  # pip's own message: which pin has no wheel for the target
        raise SystemExit(f"pip download failed ({done.returncode}):\n{done.stderr[-3000:]}")
    wheels = {}  # the cache is per target Python: any wheel of the pinned version there is the target's
    for path in cache.glob("*.whl"):
        name, version, _, _ = parse_wheel_filename(path.name)
        wheels[(canonicalize_name(name), str(version))] = path
    missing = [f"{n.name}=={n.version}" for n in pins if (n.name, n.version) not in wheels]
    if missing:
        raise SystemExit(f"no wheel for {', '.join(missing)} in {cache} after pip download")
    return {n.name: wheels[(n.name, n.version)] for n in pins}


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def strip_symbols(data: bytes) -> bytes:
    """An ELF file without its symbol tables (`strip --strip-unneeded`: what the loader needs stays), else as is."""
    if not data.startswith(b"\x7fELF") or shutil.which("strip") is None:
        return data
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "elf"
        path.write_bytes(data)
        subprocess.run(["strip", "--strip-unneeded", str(path)], check=True)
        return path.read_bytes()


def strip_wheel(src: Path, dst: Path, prefixes: tuple[str, ...]) -> list[str]:
    """Repack a wheel without the files under `prefixes` and with its ELF files' symbol tables stripped (Ray ships
    its binaries unstripped: a quarter of their compressed size). RECORD is rewritten for exactly what the new wheel
    holds, hashes included, so pip installs it like any wheel; a STRIPPED file in the .dist-info says what went.
    Returns the prefixes that matched."""
    with zipfile.ZipFile(src) as zin:
        infos = zin.infolist()
        record = next(i.filename for i in infos if i.filename.endswith(".dist-info/RECORD"))
        dist_info = record.rsplit("/", 1)[0]
        removed = sorted({p for i in infos for p in prefixes if i.filename.startswith(p)})
        symbols = "ELF symbol tables stripped" if shutil.which("strip") else "ELF files as shipped (no strip here)"
        note = (f"Repacked by sptune's tools/device/bundle.py for a device call: {symbols}; "
                "removed, as sptune never imports them:\n" + "".join(f"{p}\n" for p in removed)).encode()
        lines = []
        with zipfile.ZipFile(dst, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as zout:
            for info in infos:
                if info.filename == record or info.filename.startswith(prefixes) or info.is_dir():
                    continue
                data = strip_symbols(zin.read(info))
                zout.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
                lines.append(_record_line(info.filename, data))
            zout.writestr(f"{dist_info}/STRIPPED", note)
            lines += [_record_line(f"{dist_info}/STRIPPED", note), f"{record},,"]
            zout.writestr(record, "\n".join(lines) + "\n")
    return removed


def compiled(wheel: Path) -> bool:
    """A wheel for one platform (ELF files inside), not a pure-Python `*-none-any` one."""
    _, _, _, tags = parse_wheel_filename(wheel.name)
    return any(tag.platform != "any" for tag in tags)


def up_to_date(out: Path, pins: list[str]) -> dict | None:
    """The bundle already in `out`, if it was built from these pins and this recipe and all its wheels are there."""
    try:
        manifest = json.loads((out / "bundle.json").read_text())
    except (OSError, ValueError):
        return None
    same = (manifest.get("pins") == pins and manifest.get("ray_stripped") == list(RAY_STRIPPED)
            and manifest.get("recipe") == RECIPE)
    return manifest if same and all((out / p["wheel"]).is_file() for p in manifest["packages"]) else None


def build(out: Path, python_version: str, cache: Path) -> dict:
    bundled, linked, skipped = partition(closure(python_version), image_packages(), image_versions())
    pins = [f"{n.name}=={n.version}" for n in bundled]
    built = up_to_date(out, pins)
    if built is not None:
        return built
    wheels = download(bundled, python_version, cache)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    packages = []
    for node in bundled:
        src = wheels[node.name]
        stripped = []
        if compiled(src):  # symbol tables are a quarter to half of a compiled wheel (sqlalchemy: 4.5 -> 2.4 MiB)
            stripped = strip_wheel(src, out / src.name, RAY_STRIPPED if node.name == "ray" else ())
        else:
            shutil.copy2(src, out / src.name)
        packages.append({"name": node.name, "version": node.version, "wheel": src.name,
                         "bytes": (out / src.name).stat().st_size, "original_bytes": src.stat().st_size,
                         "stripped": stripped, "needed_by": sorted(set(node.needed_by))})
    manifest = {"python_version": python_version, "pins": pins, "ray_stripped": list(RAY_STRIPPED), "recipe": RECIPE,
                "packages": packages,
                "on_image": {n.name: sorted(set(n.needed_by)) for n in linked},
                "skipped": {n.name: SKIPPED[n.name] for n in skipped},
                "excluded": EXCLUDED, "swaps": SWAPS}
    (out / "bundle.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def describe(manifest: dict) -> str:
    def row(p: dict) -> str:
        without = f"; without {', '.join(p['stripped'])}" if p["stripped"] else ""
        cut = f" (from {p['original_bytes'] / 2**20:.2f}{without})" if p["bytes"] != p["original_bytes"] else ""
        return f"  {p['name']:28} {p['version']:12} {p['bytes'] / 2**20:6.2f} MiB{cut}"

    rows = [row(p) for p in manifest["packages"]]
    total = sum(p["bytes"] for p in manifest["packages"])
    skipped = "; ".join(f"{k}: {v}" for k, v in manifest["skipped"].items())
    return "\n".join([f"bundle for Python {manifest['python_version']}: {len(rows)} wheels, {total / 2**20:.1f} MiB",
                      *rows, f"  on the image: {', '.join(manifest['on_image'])}", f"  skipped: {skipped}"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python-version", default="3.12", help="the target's Python (the device's: 3.12)")
    ap.add_argument("--out", type=Path, default=REPO / ".device" / "bundle")
    ap.add_argument("--cache", type=Path, help="downloaded wheels (default .device/wheels/cpXY)")
    ap.add_argument("--no-size-check", action="store_true", help="a bundle that is not carried (the rehearsal's)")
    ap.add_argument("--list", action="store_true", help="print the resolution and stop")
    args = ap.parse_args(argv)
    if args.list:
        bundled, linked, skipped = partition(closure(args.python_version), image_packages(), image_versions())
        print("bundle:", " ".join(f"{n.name}=={n.version}" for n in bundled))
        print("on the image:", " ".join(n.name for n in linked))
        print("skipped:", " ".join(n.name for n in skipped))
        return 0
    cache = args.cache or REPO / ".device" / "wheels" / f"cp{args.python_version.replace('.', '')}"
    manifest = build(args.out, args.python_version, cache)
    print(describe(manifest))
    if args.no_size_check:
        return 0
    record_size(manifest, args.out)
    total, line = carry.report([args.out])
    print(f"call A carries {line}\nrecorded in {SIZE_RECORD.relative_to(REPO)}: commit it")
    return 0 if total <= carry.TARGET else 1


def record_size(manifest: dict, out: Path, path: Path = SIZE_RECORD) -> None:
    """The carried bundle's bytes (the folder as carry.py counts it) and its wheels', committed beside this script:
    CI checks the checkout against it."""
    record = {"python_version": manifest["python_version"], "bytes": carry.folder_bytes(out),
              "wheels": {p["wheel"]: p["bytes"] for p in manifest["packages"]}}
    path.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
