"""tools/device/bundle.py and carry.py: what the device bundle holds (resolved from this environment, nothing
downloaded here), a repacked wheel pip still installs, and the 64 MiB check. The bundle itself, built and used,
is tested by tests/e2e/test_device_rehearsal.py."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

from packaging.utils import canonicalize_name, parse_wheel_filename

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "device"))
import bundle  # noqa: E402
import carry  # noqa: E402
import check_env  # noqa: E402


def test_the_bundle_holds_what_the_image_lacks_and_nothing_it_has():
    nodes = bundle.closure("3.12")
    parts = bundle.partition(nodes, bundle.image_packages())
    bundled, on_image, skipped = ({n.name for n in part} for part in parts)
    assert {"ray", "optuna", "sqlalchemy", "alembic", "pydantic", "pydantic-core", "mlflow-skinny"} <= bundled
    assert {"numpy", "pyyaml", "matplotlib", "jinja2", "scikit-learn", "pyarrow"} <= on_image  # pyarrow: ray[tune]'s
    assert "cryptography" in bundled  # imported by mlflow's SQL store, declared by no requirement of the closure
    assert not {"mlflow", "torch", "datasets"} & set(nodes)  # swapped for mlflow-skinny / the image's / never used
    assert skipped == set(bundle.SKIPPED) & set(nodes)
    assert "pyasn1" not in nodes  # a skipped package's own requirements are not followed
    assert not bundled & bundle.image_packages()


def _wheel(path: Path, files: dict[str, bytes]) -> None:
    record = "demo-1.0.dist-info/RECORD"
    lines = [bundle._record_line(name, data) for name, data in files.items()] + [f"{record},,"]
    with zipfile.ZipFile(path, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr(record, "\n".join(lines) + "\n")


def test_a_repacked_wheel_lists_exactly_what_it_holds_and_installs(tmp_path: Path):
    files = {"demo/__init__.py": b"X = 1\n", "demo/big/__init__.py": b"Y = 2\n", "demo/big/data.bin": b"\0" * 4096,
             "demo-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n",
             "demo-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    src, dst = tmp_path / "src" / "demo-1.0-py3-none-any.whl", tmp_path / "demo-1.0-py3-none-any.whl"
    src.parent.mkdir()
    _wheel(src, files)
    assert bundle.strip_wheel(src, dst, ("demo/big/", "demo/absent/")) == ["demo/big/"]
    with zipfile.ZipFile(dst) as z:
        names = set(z.namelist())
        record = z.read("demo-1.0.dist-info/RECORD").decode().splitlines()
        for line in record:
            name, digest, size = line.split(",")
            if digest:
                data = z.read(name)
                hashed = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
                assert digest == f"sha256={hashed}"
                assert int(size) == len(data)
    assert not any(n.startswith("demo/big/") for n in names)
    assert {line.split(",")[0] for line in record} == names  # every file listed, nothing listed that is not there
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target", str(target),
                    str(dst)], check=True, capture_output=True)
    assert (target / "demo" / "__init__.py").is_file() and not (target / "demo" / "big").exists()
    assert "demo/big/" in (target / "demo-1.0.dist-info" / "STRIPPED").read_text()


def test_the_size_check_counts_the_checkout_and_refuses_a_call_over_60_mib(tmp_path: Path, capsys):
    small, near, big = tmp_path / "small", tmp_path / "near", tmp_path / "big"
    for folder in (small, near, big):
        folder.mkdir()
    tree = carry.checkout_bytes()
    assert 0 < tree < carry.TARGET and (REPO / "README.md").stat().st_size < tree
    (small / "a").write_bytes(b"x" * 1000)
    with open(near / "n", "wb") as f:
        f.truncate(carry.TARGET - tree + 2**20)  # with the checkout: 1 MiB over the target, under the limit
    with open(big / "b", "wb") as f:
        f.truncate(carry.LIMIT)  # the limit alone, before the checkout is added
    assert carry.main([str(small)]) == 0
    line = capsys.readouterr().out
    assert line.startswith("checkout ") and "fits, " in line and "under the 60 MiB target" in line
    assert carry.main([str(near)]) == 1
    assert "over the 60 MiB target" in capsys.readouterr().out
    assert carry.main([str(big)]) == 1
    assert "OVER by" in capsys.readouterr().out


def test_call_a_the_checkout_and_the_recorded_bundle_keep_under_60_mib():
    """CI cannot build the bundle (downloads): bundle.py records its size, and the checkout is measured here, as
    carry.py and the device tool count it. A checkout that grows past the target fails this test, not a device call."""
    record = json.loads(bundle.SIZE_RECORD.read_text())
    assert record["python_version"] == "3.12"  # the device's Python
    wheels = {canonicalize_name(parse_wheel_filename(w)[0]) for w in record["wheels"]}
    assert {"ray", "mlflow-skinny", "sqlalchemy"} <= wheels  # a record of the real bundle
    assert record["bytes"] >= sum(record["wheels"].values())  # the folder: its wheels and bundle.json
    tree = carry.checkout_bytes()
    total = tree + record["bytes"]
    assert total <= carry.TARGET, (
        f"call A would carry checkout {tree / 2**20:.1f} MiB + bundle {record['bytes'] / 2**20:.1f} MiB = "
        f"{total / 2**20:.1f} MiB, over the kit's {carry.TARGET / 2**20:.0f} MiB (the tool's limit: 64): keep large "
        "files out of the checkout (docs/results keeps report.md, not report.html) or shrink the bundle")


def test_the_image_and_the_bundle_meet_every_requirement_of_the_bundled_wheels():
    """check_env's requirement check, run here on the versions the device will hold: the bundle's pins over the
    image's packages (their versions where a device call read them, any version where none did)."""
    nodes, image, known = bundle.closure("3.12"), bundle.image_packages(), bundle.image_versions()
    assert known.get("certifi") == "2026.7.22"  # read by call A on the H200

    def unmet_on_device(bundle_knows: dict[str, str]) -> list[str]:
        bundled, _, skipped = bundle.partition(nodes, image, bundle_knows)
        have = {name: known.get(name, check_env.ANY_VERSION) for name in image}
        have |= {n.name: n.version for n in bundled}  # call A puts the bundle first on PYTHONPATH
        requires = {n.name: metadata.requires(n.name) or [] for n in bundled}
        return check_env.unmet(requires, have.get, {n.name for n in skipped}, "3.12")

    assert unmet_on_device(known) == []
    # A bundle blind to the image's versions leaves certifi to the image, and the check finds what call A found.
    [found] = unmet_on_device({})
    assert found.startswith("databricks-sdk: certifi>=") and found.endswith("(installed: 2026.7.22)")
