"""Bad data, checkpoints and models given on the command line: refused before anything
starts, with one paragraph naming the file and the fix, and nothing written.

(The spec-level corpus lives in tests/bad_specs/ and tests/test_spec.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sptune.sweep import main
from sptune.training.models.attention import flash_installed

LISTOPS_SPEC = """
name: bad_listops
task: {name: listops}
model: {d_model: 32, n_layers: 1, n_heads: 4, d_ff: 64, pooling: mean}
pretrain:
  mask_ratio: 0.1
  loss: ce
  epochs: 1
  num_samples: 1
  search: {lr: {type: grid, values: [1.0e-3]}, batch_size: {type: choice, values: [16]}}
variants:
  scratch: {search: {lr: {type: grid, values: [1.0e-3]}, batch_size: {type: choice, values: [16]}}}
  spt: {search: {lr: {type: grid, values: [1.0e-3]}, batch_size: {type: choice, values: [16]}}}
scheduler: {type: fifo}
"""


def _refused(args: list[str], capsys, *needles: str, code: int = 2) -> str:
    assert main(args) == code
    err = capsys.readouterr().err
    assert "Fix:" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    for needle in needles:
        assert needle in err, (needle, err)
    return err


@pytest.fixture
def listops_spec(tmp_path) -> Path:
    path = tmp_path / "listops.yaml"
    path.write_text(LISTOPS_SPEC)
    return path


def _listops_dir(root: Path, train_rows: list[str]) -> Path:
    folder = root / "listops"
    folder.mkdir(parents=True)
    rows = ["( ( [MAX 2 ) 9 ) ]\t9", "( ( [MIN 4 ) 1 ) ]\t1"]
    for split, body in (("train", train_rows), ("val", rows), ("test", rows)):
        (folder / f"basic_{split}.tsv").write_text("Source\tTarget\n" + "\n".join(body) + "\n")
    return root


def test_missing_data_directory(listops_spec, tmp_path, capsys):
    out = tmp_path / "out"
    _refused([str(listops_spec), "--data-dir", str(tmp_path / "absent"), "--output", str(out)], capsys, "listops")
    assert not out.exists()


def test_data_directory_without_the_task_files(listops_spec, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    _refused([str(listops_spec), "--data-dir", str(tmp_path / "empty"), "--output", str(tmp_path / "o")], capsys,
             "basic_train.tsv")
    assert not (tmp_path / "o").exists()


def test_truncated_tsv_row(listops_spec, tmp_path, capsys):
    data = _listops_dir(tmp_path / "data", ["( ( [MAX 2 ) 9 ) ]\t9", "( ( [MIN 4 ) 1 ) ]"])  # no label column
    _refused([str(listops_spec), "--data-dir", str(data), "--output", str(tmp_path / "o")], capsys, "basic_train.tsv")
    assert not (tmp_path / "o").exists()


def test_unreadable_pngs(tmp_path, capsys):
    spec = tmp_path / "pf.yaml"
    spec.write_text(LISTOPS_SPEC.replace("name: listops", "name: pathfinder").replace("loss: ce", "loss: l2"))
    meta = tmp_path / "data" / "pathfinder32" / "curv_contour_length_14"
    (meta / "metadata").mkdir(parents=True)
    (meta / "imgs" / "0").mkdir(parents=True)
    lines = []
    for i in range(4):
        (meta / "imgs" / "0" / f"sample_{i}.png").write_bytes(b"\x89PNG not really")
        lines.append(f"imgs/0 sample_{i}.png 0 {i % 2}")
    (meta / "metadata" / "0.npy").write_text("\n".join(lines) + "\n")
    _refused([str(spec), "--data-dir", str(tmp_path / "data"), "--output", str(tmp_path / "o")], capsys, "imgs")
    assert not (tmp_path / "o").exists()


def test_checkpoint_that_is_not_a_checkpoint(tmp_path, capsys, repo_root):
    bogus = tmp_path / "ckpt" / "state.pt"
    bogus.parent.mkdir()
    bogus.write_bytes(b"definitely not a torch file")
    spec = str(Path(repo_root) / "search_spaces" / "digits_quick.yaml")
    _refused([spec, "--set", f"pretrain.checkpoint={bogus}", "--output", str(tmp_path / "o")], capsys,
             str(bogus), "not a readable PyTorch checkpoint")
    assert not (tmp_path / "o").exists()


def test_checkpoint_for_another_model(tmp_path, capsys, repo_root):
    other = tmp_path / "other" / "state.pt"
    other.parent.mkdir()
    torch.save({"model": {"encoder.embed.weight": torch.zeros(16, 2)}}, other)
    spec = str(Path(repo_root) / "search_spaces" / "digits_quick.yaml")
    _refused([spec, "--set", f"pretrain.checkpoint={other.parent}", "--dry-run"], capsys,
             "does not fit this model")


def test_tensor_file_without_model_state(tmp_path, capsys, repo_root):
    plain = tmp_path / "plain" / "state.pt"
    plain.parent.mkdir()
    torch.save(torch.zeros(3), plain)
    spec = str(Path(repo_root) / "search_spaces" / "digits_quick.yaml")
    _refused([spec, "--set", f"pretrain.checkpoint={plain}", "--dry-run"], capsys, "not an sptune checkpoint")


def test_missing_spec_file(tmp_path, capsys):
    _refused([str(tmp_path / "nope.yaml"), "--dry-run"], capsys, "nope.yaml", "not found")


def test_bad_override_syntax(repo_root, capsys):
    spec = str(Path(repo_root) / "search_spaces" / "digits_quick.yaml")
    _refused([spec, "--set", "finetune.epochs", "--dry-run"], capsys, "KEY.PATH=VALUE")
    _refused([spec, "--set", "seed.deeper=3", "--dry-run"], capsys, "'seed' is not a mapping")


@pytest.mark.skipif(flash_installed(), reason="flash-attn is installed here")
def test_forcing_flash_attn_where_it_is_not_installed(tmp_path, capsys):
    spec = tmp_path / "flash.yaml"
    digits = LISTOPS_SPEC.replace("name: listops", "name: digits").replace("loss: ce", "loss: l2")
    spec.write_text(digits.replace("pooling: mean}", "pooling: mean, attention_kernel: flash}"))
    err = _refused([str(spec), "--output", str(tmp_path / "o")], capsys, "model.attention_kernel",
                   "flash-attn is not installed", "attention_kernel: auto")
    assert not (tmp_path / "o").exists(), err


def test_forcing_flash_attn_in_fp32_or_on_padded_data(listops_spec, tmp_path, capsys):
    text = listops_spec.read_text().replace("pooling: mean}", "pooling: mean, attention_kernel: flash}")
    data = _listops_dir(tmp_path / "data", ["( ( [MAX 2 ) 9 ) ]\t9", "( ( [MIN 4 ) 1 ) ]\t1", "[MIN 4 ]\t4"])
    for extra, needle in (("training: {precision: fp32}\n", "bf16/fp16 only"), ("", "padded sequences")):
        listops_spec.write_text(text + extra)
        _refused([str(listops_spec), "--data-dir", str(data), "--output", str(tmp_path / "o")], capsys,
                 "model.attention_kernel", needle)
