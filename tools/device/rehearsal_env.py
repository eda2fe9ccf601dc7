"""A CPU stand-in for the device machine's Python: a venv where only the bundle and the image's packages import.

The device has the image's packages (image_packages.txt: torch, numpy, PyYAML, matplotlib, ...) and whatever call A
installs from the bundle into /tmp/site. The stand-in: a venv of this Python without pip and without this
environment's site-packages; the bundle (built for this Python with the same pins) installed into a folder of its
own, put on PYTHONPATH as /tmp/site is there; and the image's packages that sptune's dependency closure reaches,
torch and its own requirements among them, linked from this environment rather than downloaded again (torch alone
is hundreds of MiB): a folder of symbolic links to exactly those distributions' files (their top-level packages,
modules, bundled libraries and .dist-info), named by a .pth file in the venv. Anything else this environment
holds (sptune's editable install, Ray, MLflow, ...) stays invisible, so a package missing from the bundle fails.

    python tools/device/bundle.py --python-version 3.11 --out .device/bundle311 --no-size-check
    python tools/device/rehearsal_env.py --bundle .device/bundle311 --venv .device/venv
    .device/venv/bin/python -s ...   # with PYTHONPATH=.device/venv/site:REPO
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

import bundle
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def image_closure(on_image: list[str]) -> list[str]:
    """The bundle's on-image packages plus torch and the image packages torch needs (canonical names)."""
    image = bundle.image_packages()
    torch = bundle.closure(f"{sys.version_info.major}.{sys.version_info.minor}", [Requirement("torch")])
    return sorted(set(on_image) | {name for name in torch if name in image})


def top_levels(dist: metadata.Distribution) -> set[str]:
    """The entries a distribution installs directly into site-packages (no scripts, no .pth hooks)."""
    names = {Path(str(f)).parts[0] for f in dist.files or []}
    return {n for n in names if n != ".." and not n.endswith(".pth") and n != "__pycache__"}


def link_image(names: list[str], folder: Path) -> list[str]:
    """Symbolic links in `folder` to each named distribution's installed files; returns what was linked."""
    folder.mkdir(parents=True)
    linked = []
    for name in names:
        dist = metadata.distribution(name)
        for entry in sorted(top_levels(dist)):
            target = Path(dist.locate_file(entry))
            if target.exists() and not (folder / entry).exists():
                (folder / entry).symlink_to(target)
        linked.append(f"{canonicalize_name(name)}=={dist.version}")
    return linked


def make(bundle_dir: Path, venv: Path) -> dict:
    """The venv (replacing one there), its site folder with the bundle installed, and the image's packages linked."""
    if venv.exists():
        shutil.rmtree(venv)
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    manifest = json.loads((bundle_dir / "bundle.json").read_text())
    linked = link_image(image_closure(list(manifest["on_image"])), venv / "image")
    purelib = Path(sysconfig.get_path("purelib", vars={"base": str(venv), "platbase": str(venv)}))
    (purelib / "device_image.pth").write_text(f"{(venv / 'image').resolve()}\n")
    wheels = sorted(str(p) for p in bundle_dir.glob("*.whl"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                    "--no-cache-dir", "--target", str(venv / "site"), *wheels], check=True)
    return {"python": str(venv / "bin" / "python"), "site": str(venv / "site"), "linked": linked,
            "bundled": [f"{p['name']}=={p['version']}" for p in manifest["packages"]]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, required=True, help="a bundle built for THIS Python (bundle.py)")
    ap.add_argument("--venv", type=Path, required=True)
    args = ap.parse_args(argv)
    made = make(args.bundle, args.venv)
    print(f"venv {args.venv}: {len(made['bundled'])} bundled wheels in {made['site']}; linked from here: "
          f"{', '.join(made['linked'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
