"""Bad specs are refused before anything starts: exit 2, the field path named, no output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sptune.spec import load_spec
from sptune.sweep import main

BAD = sorted((Path(__file__).parents[1] / "bad_specs").glob("*.yaml"))


def _expected(path: Path) -> str:
    return path.read_text().splitlines()[0].removeprefix("# expect:").strip()


@pytest.mark.parametrize("bad", BAD, ids=[p.stem for p in BAD])
def test_bad_spec_is_refused_naming_the_field(bad, tmp_path, capsys):
    out = tmp_path / "study"
    code = main([str(bad), "--output", str(out)])
    err = capsys.readouterr().err
    assert code == 2
    assert _expected(bad) in err, err
    assert "Fix:" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1  # one paragraph
    assert not out.exists()  # nothing written, so no MLflow store either


def test_bad_spec_starts_no_ray_and_no_mlflow(tmp_path, repo_root):
    """In a fresh process: the refusal happens before Ray or MLflow are even imported."""
    bad = Path(repo_root) / "tests" / "bad_specs" / "lr_inverted.yaml"
    code = (
        "import sys, json; from sptune.sweep import main; "
        f"rc = main([{str(bad)!r}, '--output', {str(tmp_path / 'o')!r}]); "
        "print(json.dumps({'ray': 'ray' in sys.modules, 'mlflow': 'mlflow' in sys.modules})); sys.exit(rc)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=repo_root)
    assert proc.returncode == 2
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"ray": False, "mlflow": False}
    assert "variants.spt.search.lr.low" in proc.stderr


def test_overrides_apply_and_are_validated(repo_root, tmp_path, capsys):
    spec_path = Path(repo_root) / "search_spaces" / "digits_quick.yaml"
    spec = load_spec(spec_path, ["finetune.epochs=7", "variants.spt.search.lr.low=2e-4", "model.pooling=mean"])
    assert spec.finetune.epochs == 7 and spec.variants["spt"].search.lr.low == 2e-4
    assert spec.model.pooling == "mean"
    code = main([str(spec_path), "--set", "variants.spt.search.lr.high=1e-6", "--output", str(tmp_path / "x")])
    assert code == 2 and "variants.spt.search.lr.low" in capsys.readouterr().err


def test_dry_run_prints_the_plan_without_writing(repo_root, tmp_path, capsys):
    spec_path = Path(repo_root) / "search_spaces" / "digits_quick.yaml"
    assert main([str(spec_path), "--dry-run", "--output", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    for expected in ("pretrain", "search-scratch", "search-spt", "optuna", "trials", "CPU"):
        assert expected in out
    assert not (tmp_path / "o").exists()


def test_missing_image_data_names_both_options(repo_root, tmp_path, capsys):
    spec_path = Path(repo_root) / "search_spaces" / "cifar_lr.yaml"
    (tmp_path / "empty").mkdir()  # a folder without CIFAR: the hub is tried (a missing folder is refused at once)
    code = main([str(spec_path), "--data-dir", str(tmp_path / "empty"), "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2
    assert "--data-dir" in err and "SPTUNE_DATA_DIR" in err and "Hugging Face" in err


def test_corrupt_npz_is_named(repo_root, tmp_path, capsys):
    (tmp_path / "cifar10_gray.npz").write_bytes(b"not a zip file at all")
    code = main([str(Path(repo_root) / "search_spaces" / "cifar_lr.yaml"), "--data-dir", str(tmp_path), "--dry-run"])
    err = capsys.readouterr().err
    assert code == 2 and "cifar10_gray.npz" in err


def test_unreachable_tracking_server_is_refused_before_anything(repo_root, tmp_path, capsys):
    out = tmp_path / "o"
    code = main([str(Path(repo_root) / "search_spaces" / "digits_quick.yaml"), "--output", str(out),
                 "--tracking-uri", "http://127.0.0.1:9"])
    err = capsys.readouterr().err
    assert code == 1 and "127.0.0.1:9" in err and "mlflow server" in err
    assert not out.exists()


def test_a_new_studys_refusal_does_not_wait_for_torch_or_ray_tune(repo_root, tmp_path):
    """The preflight of a new study imports neither the study machinery nor Ray Tune (~5 s on 2 cores)."""
    spec = Path(repo_root) / "search_spaces" / "digits_quick.yaml"
    probe = (
        "import sys\n"
        "from sptune.sweep import main\n"
        f"code = main([{str(spec)!r}, '--output', {str(tmp_path / 'o')!r}, '--tracking-uri', 'http://127.0.0.1:9'])\n"
        "print(code, sorted(m for m in ('sptune.study.study', 'ray.tune', 'torch') if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, cwd=repo_root)
    assert done.stdout.strip().endswith("1 []"), done.stdout + done.stderr
