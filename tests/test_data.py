"""``python -m sptune.data``: generate -> info -> prepare round trips, and error reporting."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from sptune.data import main
from sptune.tasks import TaskRequest, holdout, load_task

REPO = Path(__file__).resolve().parents[1]


pytestmark = pytest.mark.usefixtures("offline_data_env")


def info_json(capsys, *args) -> dict:
    capsys.readouterr()
    assert main(["info", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_generate_then_info_reads_the_official_layout(tmp_path, capsys):
    out = tmp_path / "data"
    assert main(["generate", "listops", "--out", str(out), "--seed", "1", "--n-train", "40", "--n-val", "6",
                 "--n-test", "8", "--min-len", "10", "--max-len", "60", "--max-depth", "4"]) == 0
    assert (out / "listops" / "basic_test.tsv").is_file()
    result = info_json(capsys, "listops", "--data-dir", str(out))
    assert result["task"] == "listops" and result["splits"] == {"train": 40, "val": 6, "test": 8}
    assert result["vocab_size"] == 19 and result["seq_len"] < 60
    assert abs(sum(result["label_balance"]["train"].values()) - 1) < 1e-3

    assert main(["generate", "pathfinder", "--out", str(out), "--seed", "2", "--n", "20"]) == 0
    result = info_json(capsys, "pathfinder", "--data-dir", str(out))
    assert result["splits"] == {"train": 16, "val": 2, "test": 2} and result["seq_len"] == 1024
    assert result["skipped"] == {"train": 0, "val": 0, "test": 0}

    sizes = ["--n-train", "12", "--n-val", "3", "--n-test", "3"]
    assert main(["generate", "bits", "--out", str(out), *sizes]) == 0
    result = info_json(capsys, "bit_xor", "--data-dir", str(out))
    assert result["splits"] == {"train": 12, "val": 3, "test": 3}


def test_prepare_caches_arrays_that_later_loads_memory_map(tmp_path, capsys):
    options = ["--set", "gen_n_train=30", "--set", "gen_n_val=5", "--set", "gen_n_test=5",
               "--set", "gen_min_len=10", "--set", "gen_max_len=50"]
    assert main(["prepare", "listops", *options]) == 0
    directory = Path(capsys.readouterr().out.split("prepared arrays in ")[1].split()[0])
    assert (directory / "test_x.npy").is_file() and (directory / "vocab.json").is_file()
    request = TaskRequest("listops", {"gen_n_train": 30, "gen_n_val": 5, "gen_n_test": 5, "gen_min_len": 10,
                                      "gen_max_len": 50})
    splits = load_task(request)
    assert "[prepared:" in splits.source and isinstance(splits.train.x, np.memmap)
    assert json.loads((directory / "vocab.json").read_text()) == list(splits.info.vocab)
    with pytest.raises(holdout.SealedSplitError):
        _ = splits.test
    with holdout.final_evaluation():
        assert len(splits.test) == 5


def test_errors_print_one_paragraph_and_exit_code(tmp_path, capsys):
    assert main(["info", "listops", "--data-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "basic_train.tsv" in err and "Fix:" in err and "Traceback" not in err
    assert main(["info", "nosuchtask"]) == 2
    assert "unknown task" in capsys.readouterr().err


def test_module_entry_point_runs(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "sptune.data", "info", "bit_xor", "--json"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["splits"] == {"train": 800, "val": 100, "test": 100}


def test_generate_text_writes_a_synthetic_aclimdb_that_reads_back(tmp_path):
    from sptune.tasks import TaskRequest, load_task

    assert main(["generate", "text", "--out", str(tmp_path), "--seed", "1", "--n-train", "40", "--n-test", "20"]) == 0
    splits = load_task(TaskRequest("text", {"n_val": 8, "max_len": 64}, 0, tmp_path))
    assert len(splits.train) == 32 and len(splits.val) == 8 and "SYNTHETIC" in splits.source.upper()


def test_info_without_a_task_lists_every_task_and_model_family(capsys):
    from sptune.data import main

    assert main(["info"]) == 0
    printed = capsys.readouterr().out
    assert "tasks (task: {name: NAME}" in printed and "model families" in printed
    assert re.search(r"^  digits +built-in +UCI handwritten digits", printed, re.M)
    assert re.search(r"^  ssm +built-in$", printed, re.M)
