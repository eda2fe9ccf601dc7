"""tools/device/bundle.py and carry.py: what the device bundle holds (resolved from this environment, nothing
downloaded here), a repacked wheel pip still installs, and the 64 MiB check. The bundle itself, built and used,
is tested by tests/e2e/test_device_rehearsal.py."""

from __future__ import annotations

import base64
import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "device"))
import bundle  # noqa: E402
import carry  # noqa: E402


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


def test_the_size_check_counts_the_checkout_and_refuses_a_call_over_64_mib(tmp_path: Path, capsys):
    small, big = tmp_path / "small", tmp_path / "big"
    small.mkdir()
    big.mkdir()
    (small / "a").write_bytes(b"x" * 1000)
    with open(big / "b", "wb") as f:
        f.truncate(carry.LIMIT)  # the limit alone, before the checkout is added
    assert carry.main([str(small)]) == 0
    line = capsys.readouterr().out
    assert line.startswith("checkout ") and line.rstrip().endswith("fits")
    tree = carry.checkout_bytes()
    assert 0 < tree < carry.LIMIT and (REPO / "README.md").stat().st_size < tree
    assert carry.main([str(big)]) == 1
    assert "OVER by" in capsys.readouterr().out
