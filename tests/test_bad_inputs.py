"""Every bad input refused before anything trains, for the three command lines: `python -m sptune.sweep
--dry-run`, `python -m sptune.report` and `python -m sptune.data`. Each case asserts the exit code (2 for the
input, 1 where a real run's preflight gives 1: a service that does not answer), no traceback, one paragraph, and
the field (or flag, or file) named; a sweep case also that nothing was written.

Each CLI's main() runs in this process (a subprocess per case would import torch and MLflow again each time).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from sptune.data import main as data_main
from sptune.report.__main__ import main as report_main
from sptune.sweep import main as sweep_main

REPO = Path(__file__).resolve().parents[1]
DIGITS = REPO / "search_spaces" / "digits_quick.yaml"
GRID = "search: {lr: {type: grid, values: [1.0e-3]}, batch_size: {type: choice, values: [32]}}"

# A small Image spec: 500 training rows at 8x8, warm-up as a share of the budget (the task's steps would not fit).
IMAGE_SPEC = f"""name: image_small
task: {{name: image, n_val: 100, resolution: 8}}
model: {{d_model: 16, n_layers: 1, n_heads: 2, d_ff: 32}}
pretrain: {{epochs: 2, num_samples: 1, {GRID}}}
finetune: {{epochs: 2}}
variants:
  scratch: {{{GRID}}}
  spt: {{{GRID}}}
scheduler: {{type: fifo}}
training: {{warmup_fraction: 0.1}}
"""
# The same without a warm-up of its own: it inherits the task's (the reference's 2,000 / 2,500 steps).
IMAGE_INHERITING = IMAGE_SPEC.replace("training: {warmup_fraction: 0.1}\n", "")
CAMPAIGN = "campaign: {name}\nstudies:\n  - spec: {spec}\n    name: {study}\n"


@dataclass(frozen=True)
class Case:
    """One bad input: the CLI, its arguments (``{tmp}``, ``{digits}``, ``{image}``, ``{cifar}`` ... filled in), the
    text the message must hold (the field), the exit code, and text it must not hold."""

    id: str
    cli: str  # sweep | report | data
    argv: tuple[str, ...]
    names: str
    code: int = 2
    absent: tuple[str, ...] = ()
    files: dict[str, str] = field(default_factory=dict)  # name under tmp -> text to write first


def sweep(id: str, names: str, *argv: str, spec: str = "{digits}", code: int = 2, absent: tuple[str, ...] = (),
          files: dict[str, str] | None = None) -> Case:
    return Case(id, "sweep", (spec, "--dry-run", *argv), names, code, absent, files or {})


def digits_set(id: str, names: str, *assignments: str, **kw) -> Case:
    return sweep(id, names, *(a for s in assignments for a in ("--set", s)), **kw)


def image_set(id: str, names: str, *assignments: str, data: str = "{cifar}", **kw) -> Case:
    args = [a for s in assignments for a in ("--set", s)]
    return sweep(id, names, *args, "--data-dir", data, spec="{image}", **kw)


def spec_file(id: str, names: str, text: str, **kw) -> Case:
    return sweep(id, names, spec="{tmp}/spec.yaml", files={"spec.yaml": text}, **kw)


def report(id: str, names: str, results: str | None, *argv: str) -> Case:
    files = {"run/results.json": results} if results is not None else {}
    return Case(id, "report", argv or ("{tmp}/run",), names, files=files)


def data(id: str, names: str, *argv: str, absent: tuple[str, ...] = ()) -> Case:
    return Case(id, "data", argv, names, absent=absent)


# ------------------------------------------------------------------ the groups, then more of our own
TRACEBACKS = [
    image_set("image-resolution-14", "task.resolution", "task.resolution=14"),
    image_set("image-resolution-33", "task.resolution", "task.resolution=33"),
    image_set("image-resolution-0", "task.resolution", "task.resolution=0"),
    digits_set("n_val-abc", "task.n_val", "task.n_val=abc", "task.name=image", "task.resolution=8"),
    image_set("n_val-abc-image", "task.n_val", "task.n_val=abc"),
    image_set("resolution-16px", "task.resolution", "task.resolution=16px"),
    image_set("max_train-all", "task.max_train", "task.max_train=all"),
    image_set("npz-784-columns", "cifar10_gray.npz", data="{cifar784}"),
]
SPLITS = [
    image_set("n_val-negative", "task.n_val", "task.n_val=-5"),
    image_set("n_val-zero", "task.n_val", "task.n_val=0"),
    image_set("n_val-all-rows", "task.n_val", "task.n_val=600"),
    image_set("n_val-above-rows", "task.n_val", "task.n_val=60000"),
    image_set("n_val-fraction", "task.n_val", "task.n_val=2.7"),
    image_set("max_train-negative", "task.max_train", "task.max_train=-100"),
    image_set("max_train-zero", "task.max_train", "task.max_train=0"),
    image_set("max_train-below-batch", "batch_size", "task.max_train=5"),
    image_set("npz-more-x-than-y", "y has", data="{cifar_lengths}"),
    image_set("npz-labels-beyond-classes", "labels run 0..49", data="{cifar_labels}"),
    image_set("npz-float-labels", "whole-number label", data="{cifar_float_labels}"),
    image_set("npz-missing-arrays", "missing arrays", data="{cifar_missing}"),
    image_set("npz-float-pixels", "whole levels 0..255", data="{cifar_float_pixels}"),
    digits_set("train_fraction-leaves-no-batch", "batch_size", "task.train_fraction=0.01"),
]
VALUES = [
    digits_set("batch-100000", "variants.spt.search.batch_size",
               "variants.spt.search.batch_size={type: choice, values: [100000]}"),
    digits_set("pretrain-batch-above-rows", "pretrain.search.batch_size",
               "pretrain.search.batch_size={type: choice, values: [5000]}"),
    digits_set("seed-negative", "seed", "seed=-1"),
    digits_set("seed-2**70", "seed", f"seed={2**70}"),
    digits_set("seed-true", "seed", "seed=true"),
    digits_set("seed-fraction", "seed", "seed=1.5"),
    digits_set("pretrain-epochs-negative", "pretrain.epochs", "pretrain.epochs=-1", absent=("use 0 for no",)),
    digits_set("name-parent-path", "name", "name=../../evil"),
    digits_set("name-separator", "name", "name=a/b"),
    digits_set("name-empty", "name", "name=''"),
    digits_set("name-space-at-end", "name", "name='study '"),
    digits_set("name-dots", "name", "name=.."),
    digits_set("name-backslash", "name", "name=a\\b"),
    digits_set("name-newline", "name", 'name="a\\nb"'),
    digits_set("name-too-long", "name", f"name={'a' * 101}"),
    digits_set("name-number", "name", "name=[1]"),
    digits_set("finetune-epochs-true", "finetune.epochs", "finetune.epochs=true", absent=("grace_period",)),
    spec_file("duplicate-seed-key", "seed", DIGITS.read_text().replace("seed: 0", "seed: 0\nseed: 1")),
    spec_file("duplicate-nested-key", "epochs",
              DIGITS.read_text().replace("  epochs: 20\n  weight_decay", "  epochs: 20\n  epochs: 5\n  weight_decay")),
    digits_set("top_k-above-every-search", "selection.top_k", "selection.top_k=10"),
    digits_set("cpu-1000", "resources.cpu", "resources.cpu=1000"),
    sweep("output-is-a-file", "--output", "--output", "{tmp}/afile", files={"afile": "x"}),
    sweep("tracking-uri-unknown-scheme", "--tracking-uri", "--tracking-uri", "foo://bar"),
    digits_set("spec-tracking-uri-unknown-scheme", "tracking.uri", "tracking.uri=foo://bar"),
]
WARMUPS = [
    sweep("image-inherits-pretrain-warmup", "pretrain.warmup_steps", "--data-dir", "{cifar}", spec="{image_ref}"),
    sweep("image-inherits-finetune-warmup", "training.warmup_steps", "--data-dir", "{cifar}",
          "--set", "pretrain.warmup_steps=4", spec="{image_ref}"),
    sweep("image-inherits-warmup-at-bigger-batch", "warmup_steps", "--data-dir", "{cifar}", "--set",
          "variants.spt.search.batch_size={type: choice, values: [32, 64]}", spec="{image_ref}"),
]
DRY_RUN_FLAGS = [
    sweep("resume-empty-folder", "--output", "--resume", "--output", "{tmp}/empty", files={"empty/.keep": ""}),
    sweep("resume-missing-folder", "--output", "--resume", "--output", "{tmp}/missing"),
    sweep("resume-without-output", "--resume", "--resume"),
    sweep("tracking-server-down", "--tracking-uri http://127.0.0.1:9", "--tracking-uri", "http://127.0.0.1:9", code=1),
    sweep("optuna-storage-not-a-url", "--optuna-storage", "--optuna-storage", "notaurl"),
    sweep("optuna-postgres-down", "--optuna-storage postgresql://", "--optuna-storage",
          "postgresql://sptune@127.0.0.1:9/sptune", code=1),
    sweep("optuna-in-memory", "--optuna-storage", "--optuna-storage", "sqlite://"),
    sweep("optuna-sqlite-no-folder", "--optuna-storage", "--optuna-storage", "sqlite:////nonexistent-dir/o.db"),
    sweep("ray-head-down", "--address 127.0.0.1:9", "--address", "127.0.0.1:9", code=1),
    sweep("ray-address-not-host-port", "--address", "--address", "nonsense"),
    sweep("storage-unknown-scheme", "--storage", "--storage", "zzz://bucket/x"),
    sweep("storage-with-credentials", "--storage", "--storage", "s3://KEY:SECRET@bucket/x"),
    digits_set("gpu-2-without-gpus", "resources.gpu", "resources.gpu=2"),
    digits_set("cuda-without-gpu-share", "training.device", "training.device=cuda"),
]
MISLEADING = [
    sweep("set-empty-key", "--set =5", "--set", "=5"),
    sweep("set-empty-segment", "--set a..b=1", "--set", "a..b=1"),
    sweep("set-no-equals", "--set finetune.epochs", "--set", "finetune.epochs"),
    sweep("data-dir-missing", "--data-dir", "--data-dir", "{tmp}/nowhere", spec="{image}"),
    image_set("npz-corrupt", "truncated or corrupt", data="{cifar_corrupt}", absent=("allow_pickle", "pickle")),
    image_set("npz-truncated", "truncated or corrupt", data="{cifar_truncated}", absent=("allow_pickle",)),
]
OWN = [
    # Booleans where numbers are meant, across the sections.
    *(digits_set(f"bool-{key}", key, f"{key}={value}") for key, value in (
        ("model.d_model", "true"), ("model.dropout", "false"), ("pretrain.mask_ratio", "true"),
        ("pretrain.epochs", "true"), ("finetune.num_samples", "true"), ("scheduler.grace_period", "true"),
        ("scheduler.reduction_factor", "true"), ("training.warmup_fraction", "true"), ("training.grad_clip", "true"),
        ("resources.cpu", "true"), ("rerun_seeds", "true"), ("max_failures", "true"), ("selection.top_k", "true"),
        ("searcher.batch_size", "true"), ("lr_extend.max_rounds", "true"), ("variants.spt.epochs", "true"),
        ("variants.spt.search.lr.low", "true"))),
    # Task options typed and ranged, every task.
    *(digits_set(f"option-{task}-{key}-{value}", f"task.{key}", f"task.name={task}", f"task.{key}={value}")
      for task, key, value in (
          ("listops", "max_len", "abc"), ("listops", "max_len", "0"), ("listops", "gen_seed", "-1"),
          ("listops", "generate", "maybe"), ("listops", "gen_n_train", "0"), ("listops", "gen_min_len", "400"),
          ("listops", "max_train", "1.5"), ("retrieval", "gen_n_topics", "0"), ("retrieval", "gen_min_chars", "500"),
          ("pathfinder", "resolution", "5"), ("pathfinder", "gen_n", "-1"), ("pathx", "resolution", "100"),
          ("bit_memory", "mask_prob", "1.5"), ("bit_xor", "n_bits", "0"), ("bit_xor", "data_seed", "-3"),
          ("text", "n_val", "-1"), ("digits", "train_fraction", "0"), ("digits", "train_fraction", "1.5"),
          ("digits", "train_fraction", "true"), ("digits", "resolution", "8"))),
    digits_set("unknown-task", "task.name", "task.name=mnist"),
    digits_set("source-task-option", "variants.spt.source_task", "variants.spt.kind=spt_cross",
               "variants.spt.source_task={name: listops, max_len: -1}"),
    spec_file("campaign-name-path", "campaign", CAMPAIGN.format(name="../x", spec=DIGITS, study="d")),
    spec_file("campaign-study-name-path", "studies[0].name", CAMPAIGN.format(name="c", spec=DIGITS, study="a/b")),
    spec_file("campaign-member-option", "task.max_train",
              CAMPAIGN.format(name="c", spec=DIGITS, study="d") + "    set: {task.max_train: 0}\n"),
    spec_file("not-utf8", "not a UTF-8", "\udcff"),
    spec_file("yaml-syntax", "YAML syntax error", "name: [unclosed\n"),
]
REPORT = [
    report("results-empty-list", "results.json", "[]"),
    report("results-string", "results.json", '"x"'),
    report("results-number", "results.json", "5"),
    report("results-null", "results.json", "null"),
    report("results-not-json", "results.json", "{not json"),
    report("results-rows-number", "rows", '{"rows": 5}'),
    report("results-rows-of-numbers", "rows[0]", '{"rows": [1]}'),
    report("results-row-without-variant", "rows[0]", '{"rows": [{"test_acc": 0.5}]}'),
    report("results-mlflow-string", "mlflow", '{"mlflow": "x"}'),
    report("results-timeline-number", "timeline", '{"timeline": 3}'),
    report("results-timeline-of-strings", "timeline[0]", '{"rows": [{"variant": "a"}], "timeline": ["x"]}'),
    report("results-studies-number", "studies", '{"campaign": "c", "studies": 5}'),
    report("results-no-rows", "{tmp}/run", "{}"),
    report("no-such-target", "neither a study output directory", None, "{tmp}/nothing-here"),
    report("run-id-without-store", "tracking store", None, "0123456789abcdef0123456789abcdef"),
    report("run-id-sqlite-missing", "SQLite file does not exist", None, "0123456789abcdef0123456789abcdef",
           "--tracking-uri", "sqlite:///{tmp}/none.db"),
]
DATA = [
    data("generate-pathfinder-resolution-0", "--resolution", "generate", "pathfinder", "--out", "{tmp}/g",
         "--resolution", "0"),
    data("generate-bits-out-file", "--out", "generate", "bits", "--out", "{tmp}/afile"),
    data("generate-listops-n-train-negative", "--n-train", "generate", "listops", "--out", "{tmp}/g", "--n-train",
         "-5"),
    data("generate-listops-n-train-0", "--n-train", "generate", "listops", "--out", "{tmp}/g", "--n-train", "0"),
    data("generate-listops-n-val-0", "--n-val", "generate", "listops", "--out", "{tmp}/g", "--n-val", "0"),
    data("generate-listops-n-test-negative", "--n-test", "generate", "listops", "--out", "{tmp}/g", "--n-test", "-1"),
    data("generate-listops-lengths-swapped", "--min-len", "generate", "listops", "--out", "{tmp}/g", "--min-len",
         "300", "--max-len", "50"),
    data("generate-listops-depth-0", "--max-depth", "generate", "listops", "--out", "{tmp}/g", "--max-depth", "0"),
    data("generate-listops-args-0", "--max-args", "generate", "listops", "--out", "{tmp}/g", "--max-args", "0"),
    data("generate-retrieval-n-val-0", "--n-val", "generate", "retrieval", "--out", "{tmp}/g", "--n-val", "0"),
    data("generate-text-n-train-0", "--n-train", "generate", "text", "--out", "{tmp}/g", "--n-train", "0"),
    data("generate-pathfinder-n-0", "--n", "generate", "pathfinder", "--out", "{tmp}/g", "--n", "0"),
    data("generate-pathfinder-contour-0", "--contour-length", "generate", "pathfinder", "--out", "{tmp}/g",
         "--contour-length", "0"),
    data("generate-bits-n-bits-0", "--n-bits", "generate", "bits", "--out", "{tmp}/g", "--n-bits", "0"),
    data("generate-seed-negative", "--seed", "generate", "bits", "--out", "{tmp}/g", "--seed", "-1"),
    data("info-listops-max_len-abc", "task.max_len", "info", "listops", "--set", "max_len=abc"),
    data("info-image-resolution-14", "task.resolution", "info", "image", "--set", "resolution=14"),
    data("info-image-resolution-0", "task.resolution", "info", "image", "--set", "resolution=0"),
    data("info-image-n_val-above-rows", "task.n_val", "info", "image", "--data-dir", "{cifar}", "--set",
         "n_val=5000"),
    data("info-image-npz-784", "cifar10_gray.npz", "info", "image", "--data-dir", "{cifar784}"),
    data("info-image-npz-labels", "labels run", "info", "image", "--data-dir", "{cifar_labels}"),
    data("info-image-corrupt", "truncated or corrupt", "info", "image", "--data-dir", "{cifar_corrupt}",
         absent=("allow_pickle",)),
    data("info-data-dir-missing", "--data-dir", "info", "listops", "--data-dir", "{tmp}/nowhere"),
    data("info-set-empty-key", "--set =5", "info", "listops", "--set", "=5"),
    data("prepare-set-no-equals", "--set x", "prepare", "digits", "--set", "x"),
    data("info-unknown-option", "task.nope", "info", "digits", "--set", "nope=1"),
    data("info-unknown-task", "task.name", "info", "mnist"),
    data("info-bit_xor-n_bits-0", "task.n_bits", "info", "bit_xor", "--set", "n_bits=0"),
    data("info-bit_memory-mask_prob-2", "task.mask_prob", "info", "bit_memory", "--set", "mask_prob=2"),
    data("info-listops-gen_seed-negative", "task.gen_seed", "info", "listops", "--set", "gen_seed=-1"),
    data("info-listops-generate-word", "task.generate", "info", "listops", "--set", "generate=maybe"),
    data("info-listops-max_train-0", "task.max_train", "info", "listops", "--set", "max_train=0"),
    data("info-listops-lengths-swapped", "task.gen_min_len", "info", "listops", "--set", "gen_min_len=500"),
    data("info-pathfinder-resolution-5", "task.resolution", "info", "pathfinder", "--set", "resolution=5"),
    data("info-text-n_val-negative", "task.n_val", "info", "text", "--set", "n_val=-1"),
    data("prepare-digits-train_fraction-0", "task.train_fraction", "prepare", "digits", "--set", "train_fraction=0"),
]
# ------------------------------------------------------------------ plug-ins breaking their contract (sptune.plugins)
# The plug-ins are in tests/helpers_plugins.py, named by import path (the repository root is on sys.path).
PLUGIN = "tests.helpers_plugins"
PLUGINS = [
    digits_set("plugin-model-wrong-shape", "model.family", f"model.family={PLUGIN}:POOLED"),
    digits_set("plugin-model-wrong-dtype", "returned dtype torch.int64", f"model.family={PLUGIN}:INTEGER"),
    digits_set("plugin-model-unsupported-kind", "variant kind 'qk_init' is not supported by model family "
               f"'{PLUGIN}:PER_POSITION'", f"model.family={PLUGIN}:PER_POSITION", "variants.spt.kind=qk_init"),
    digits_set("plugin-model-causal-unsupported", "variants.spt", f"model.family={PLUGIN}:PER_POSITION",
               "pretrain.objective=causal"),
    digits_set("plugin-model-not-a-family", "not a sptune.plugins.ModelFamily", f"model.family={PLUGIN}:NOT_A_FAMILY"),
    digits_set("plugin-model-import-fails", "module 'no_such_pkg.models', which does not import",
               "model.family=no_such_pkg.models:GRU"),
    digits_set("plugin-model-unknown-name", "unknown model family 'gru'", "model.family=gru"),
    digits_set("plugin-model-unknown-option", "model.options.depth", f"model.family={PLUGIN}:RECORDING",
               "model.options.depth=2"),
    digits_set("builtin-model-options", "model.options", "model.options.cell=gru"),
    digits_set("plugin-task-wrong-dtype", "x has dtype float32", f"task.name={PLUGIN}:FLOAT_ROWS"),
    digits_set("plugin-task-wrong-shape", f"task.name ({PLUGIN}:SHORT_ROWS", f"task.name={PLUGIN}:SHORT_ROWS"),
    digits_set("plugin-task-not-splits", "not a sptune.plugins.TaskSplits", f"task.name={PLUGIN}:NOT_SPLITS"),
    digits_set("plugin-task-import-fails", "module 'no_such_pkg.tasks', which does not import",
               "task.name=no_such_pkg.tasks:TASK"),
    data("info-plugin-task-import-fails", "no_such_pkg.tasks", "info", "no_such_pkg.tasks:TASK"),
    data("info-plugin-task-wrong-dtype", "x has dtype float32", "info", f"{PLUGIN}:FLOAT_ROWS"),
]
CASES = TRACEBACKS + SPLITS + VALUES + WARMUPS + DRY_RUN_FLAGS + MISLEADING + OWN + REPORT + DATA + PLUGINS


# ------------------------------------------------------------------ data files the cases name
def _cifar(path: Path, n: int = 600, side: int = 1024, y: np.ndarray | None = None, x_rows: int | None = None,
           drop: str | None = None, pixels: type = np.uint8) -> Path:
    """A CIFAR-shaped npz in its own folder: ``n`` rows of ``side`` pixels (x_rows to break x's length), labels
    ``y`` (default 0..9), without array ``drop``."""
    path.mkdir(parents=True)
    rng = np.random.default_rng(0)
    labels = y if y is not None else np.arange(n) % 10
    arrays = {"x_train": rng.integers(0, 256, (x_rows or n, side), dtype=np.uint8).astype(pixels), "y_train": labels,
              "x_test": rng.integers(0, 256, (50, side), dtype=np.uint8), "y_test": np.arange(50) % 10}
    np.savez(path / "cifar10_gray.npz", **{k: v for k, v in arrays.items() if k != drop})
    return path


@pytest.fixture(scope="module")
def places(tmp_path_factory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("bad_inputs")
    corrupt = root / "corrupt"
    corrupt.mkdir()
    (corrupt / "cifar10_gray.npz").write_bytes(b"not a zip file at all")
    truncated = root / "truncated"
    truncated.mkdir()
    whole = (_cifar(root / "whole") / "cifar10_gray.npz").read_bytes()
    (truncated / "cifar10_gray.npz").write_bytes(whole[: len(whole) // 2])
    (root / "image.yaml").write_text(IMAGE_SPEC)
    (root / "image_ref.yaml").write_text(IMAGE_INHERITING)
    return {
        "digits": str(DIGITS), "image": str(root / "image.yaml"), "image_ref": str(root / "image_ref.yaml"),
        "cifar": str(_cifar(root / "cifar")), "cifar784": str(_cifar(root / "c784", side=784)),
        "cifar_lengths": str(_cifar(root / "lengths", n=500, x_rows=600)),
        "cifar_labels": str(_cifar(root / "labels", y=np.arange(600) % 50)),
        "cifar_float_labels": str(_cifar(root / "float_labels", y=np.arange(600) % 10 + 0.5)),
        "cifar_missing": str(_cifar(root / "missing", drop="y_test")),
        "cifar_float_pixels": str(_cifar(root / "float_pixels", pixels=np.float32)),
        "cifar_corrupt": str(corrupt), "cifar_truncated": str(truncated),
    }


_MAINS: dict[str, Callable[[list[str]], int]] = {"sweep": sweep_main, "report": report_main, "data": data_main}


def _fill(text: str, places: dict[str, str]) -> str:
    """``{name}`` replaced by its place (str.format would read a YAML mapping's braces as fields too)."""
    for name, value in places.items():
        text = text.replace("{" + name + "}", value)
    return text


def _run(case: Case, tmp: Path, places: dict[str, str], capsys) -> tuple[int, str]:
    for name, text in case.files.items():
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / name).write_bytes(text.encode("utf-8", "surrogateescape"))
    (tmp / "afile").write_text("x")
    fill = {**places, "tmp": str(tmp)}
    argv = [_fill(arg, fill) for arg in case.argv]
    if case.cli == "sweep" and "--output" not in argv and "--resume" not in argv:
        argv += ["--output", str(tmp / "out")]
    code = _MAINS[case.cli](argv)
    printed = capsys.readouterr()
    return code, printed.out + printed.err


def test_at_least_120_cases_over_every_cli_and_group():
    assert len(CASES) >= 120 and len({c.id for c in CASES}) == len(CASES)
    assert {c.cli for c in CASES} == set(_MAINS)
    assert all(group for group in (TRACEBACKS, SPLITS, VALUES, WARMUPS, DRY_RUN_FLAGS, MISLEADING, REPORT, DATA))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_refused_naming_the_field(case: Case, tmp_path, places, capsys):
    code, printed = _run(case, tmp_path, places, capsys)
    names = _fill(case.names, {"tmp": str(tmp_path)})
    assert code == case.code, printed
    assert "Traceback" not in printed and "Fix:" in printed, printed
    assert len(printed.strip().splitlines()) == 1, printed  # one paragraph
    assert names in printed, (names, printed)
    for text in case.absent:
        assert text not in printed, (text, printed)
    if case.cli == "sweep":
        assert not (tmp_path / "out").exists()  # nothing written


# ------------------------------------------------------------------ what is accepted, and what the dry run says
def test_the_small_image_spec_is_accepted(places, tmp_path, capsys):
    """The base every image case breaks one thing of: valid as it stands."""
    assert sweep_main([places["image"], "--dry-run", "--data-dir", places["cifar"]]) == 0
    assert "500 train / 100 val" in capsys.readouterr().out


def test_a_warmup_the_spec_writes_is_stated_in_the_plan_not_refused(places, capsys):
    argv = [places["image_ref"], "--dry-run", "--data-dir", places["cifar"], "--set", "training.warmup_steps=2000",
            "--set", "pretrain.warmup_steps=2500"]
    assert sweep_main(argv) == 0
    out = capsys.readouterr().out
    assert "Note: training.warmup_steps 2000 (as the spec writes it)" in out
    assert "Note: pretrain.warmup_steps 2500 (as the spec writes it)" in out


def test_the_dry_run_says_which_checks_it_could_not_make(tmp_path, capsys, monkeypatch):
    """With --address the cluster's GPUs and CPUs are known only once joined: the dry run says so (the head
    itself is probed, so a head that does not answer is refused: the case ray-head-down)."""
    import socket

    monkeypatch.setattr("sptune.study.ray_session.is_connected", lambda: False)  # not the suite's shared Ray
    with socket.socket() as head:  # something answers TCP at this address, as a Ray head's GCS would
        head.bind(("127.0.0.1", 0))
        head.listen()
        address = f"127.0.0.1:{head.getsockname()[1]}"
        assert sweep_main([str(DIGITS), "--dry-run", "--address", address, "--output", str(tmp_path / "o")]) == 0
    out = capsys.readouterr().out
    assert "Preflight: every check a real run makes before it starts passed" in out
    assert f"resources.gpu and resources.cpu against the Ray cluster at {address}" in out
    assert not (tmp_path / "o").exists()


def test_pretraining_for_zero_epochs_stays_the_budget_axis_origin(capsys):
    """pretrain.epochs: 0 is sweeps/listops_budget.yaml's first study (SPT from an untrained encoder)."""
    assert sweep_main([str(DIGITS), "--dry-run", "--set", "pretrain.epochs=0", "--set", "scheduler.type=fifo"]) == 0


# ------------------------------------------------------------------ your own data: tasks hf and arrays
# A block of its own (its own data, fixture and test), so that other cases can be added above independently.
OWN_GRID = "search: {lr: {type: grid, values: [1.0e-3]}, batch_size: {type: choice, values: [16]}}"
OWN_HF_SPEC = f"""name: own_hf
task: {{name: hf, source: {{hf_disk}}, max_length: 32}}
model: {{d_model: 16, n_layers: 1, n_heads: 2, d_ff: 32}}
pretrain: {{epochs: 1, num_samples: 1, loss: ce, mask_ratio: 0.15, {OWN_GRID}}}
finetune: {{epochs: 1}}
variants:
  scratch: {{{OWN_GRID}}}
  spt: {{{OWN_GRID}}}
scheduler: {{type: fifo}}
training: {{warmup_fraction: 0.1}}
"""
OWN_ARRAYS_SPEC = OWN_HF_SPEC.replace("{name: hf, source: {hf_disk}, max_length: 32}",
                                      "{name: arrays, path: {npz_no_test}, input: tokens}")


def own_hf(id: str, names: str, *assignments: str, spec: str = "{own_hf}") -> Case:
    return sweep(id, names, *(a for s in assignments for a in ("--set", s)), spec=spec)


OWN_DATA = [
    own_hf("hf-missing-column", "task.label_column", "task.label_column=stars"),
    own_hf("hf-missing-input-column", "task.input_column", "task.input_column=body"),
    own_hf("hf-float-labels", "task.label_column", "task.label_column=score"),
    own_hf("hf-text-column-as-image", "task.input", "task.input=image"),
    own_hf("hf-overlapping-splits", "task.splits.validation", "task.splits={train: train, validation: 'train[:10]'}"),
    own_hf("hf-no-such-split", "task.splits.test", "task.splits.test=tset"),
    own_hf("hf-source-missing-path", "task.source", "task.source=./nowhere"),
    own_hf("hf-source-unknown-format", "task.source", "task.source={xlsx: [a.xlsx]}"),
    own_hf("hf-vocab-unknown", "task.vocab", "task.vocab=bpe"),
    own_hf("hf-validation-fraction-1", "task.validation_fraction", "task.validation_fraction=1.0"),
    own_hf("arrays-missing-key", "y_test", spec="{own_arrays}"),
    own_hf("arrays-no-input", "task.input", "task.input=null", spec="{own_arrays}"),
    data("info-hf-missing-column", "task.label_column", "info", "hf", "--set", "source={hf_disk}", "--set",
         "label_column=stars"),
    data("info-arrays-missing-key", "y_test", "info", "arrays", "--set", "path={npz_no_test}", "--set",
         "input=tokens"),
]


@pytest.fixture(scope="module")
def own_places(tmp_path_factory, places) -> dict[str, str]:
    import datasets

    root = tmp_path_factory.mktemp("own_data")
    rows = {"text": [f"review {i} {'good' if i % 2 else 'bad'}" for i in range(100)], "label": [i % 2 for i in
            range(100)], "score": [i / 10 for i in range(100)]}  # fmt: skip
    ds = datasets.Dataset.from_dict(rows)
    datasets.DatasetDict({"train": ds.select(range(80)), "test": ds.select(range(80, 100))}).save_to_disk(
        str(root / "hf_disk"))
    arrays = {"x_train": np.zeros((60, 8), np.int64), "y_train": np.arange(60) % 2}
    np.savez(root / "no_test.npz", **arrays)
    found = {"hf_disk": str(root / "hf_disk"), "npz_no_test": str(root / "no_test.npz")}
    (root / "own_hf.yaml").write_text(_fill(OWN_HF_SPEC, found))
    (root / "own_arrays.yaml").write_text(_fill(OWN_ARRAYS_SPEC, found))
    return {**places, **found, "own_hf": str(root / "own_hf.yaml"), "own_arrays": str(root / "own_arrays.yaml")}


@pytest.mark.parametrize("case", OWN_DATA, ids=[c.id for c in OWN_DATA])
def test_own_data_mistakes_are_refused_naming_the_field(case: Case, tmp_path, own_places, capsys):
    test_bad_input_is_refused_naming_the_field(case, tmp_path, own_places, capsys)


def test_the_small_own_data_spec_is_accepted(own_places, capsys):
    """The base every hf case above breaks one thing of: valid as it stands."""
    assert sweep_main([own_places["own_hf"], "--dry-run"]) == 0
    assert "72 train / 8 val" in capsys.readouterr().out


# ------------------------------------------------------------------ variant kinds a model family does not support
# The feature matrix (tests/training/test_feature_matrix.py) trains every kind each family supports; each other
# pair is refused here at --dry-run, one test each, naming the variant and the fix.
UNSUPPORTED_KINDS = {"ssm": ("qk_init", "frozen_attn", "frozen_attn_mlp")}  # defined on attention weights
FAMILY_REFUSALS = [
    digits_set(f"{family}-{kind}", f"variants.{kind}", f"model.family={family}", f"variants.{kind}={{{GRID}}}")
    for family, kinds in UNSUPPORTED_KINDS.items() for kind in kinds
]


@pytest.mark.parametrize("case", FAMILY_REFUSALS, ids=[c.id for c in FAMILY_REFUSALS])
def test_a_kind_its_model_family_does_not_support_is_refused_at_the_dry_run(case: Case, tmp_path, places, capsys):
    code, printed = _run(case, tmp_path, places, capsys)
    assert code == 2, printed
    assert "Traceback" not in printed and len(printed.strip().splitlines()) == 1, printed
    assert case.names in printed and "defined on attention weights" in printed, printed
    assert "Fix: use model.family: transformer, or drop the variant" in printed, printed
    assert not (tmp_path / "out").exists()


def test_the_refusals_are_every_pair_the_matrix_leaves_out():
    """A kind or family added later is either trained by the matrix or listed above: never neither."""
    from tests.helpers_matrix import unsupported_pairs

    listed = [(family, kind) for family, kinds in UNSUPPORTED_KINDS.items() for kind in kinds]
    assert sorted(unsupported_pairs()) == sorted(listed)


# ------------------------------------------------------------------ YAML aliases, size and depth; files not specs
# Each of these is refused while the file is composed, before anything walks it: through `sptune.sweep`, through
# `sptune.jobs submit` (staged before any cluster is contacted), as a campaign's study spec and in a campaign's
# `set:` block, in well under a second, exit 2, one paragraph naming the line.
SELF_ALIAS = "a: &a [*a]\n"  # a list that contains itself
ALIAS_BOMB = "name: bomb\nseed: 0\ntask: digits\na0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 9)
)  # 12 lines, 9 ** 9 values when expanded
DEEP = "name: deep\nseed: 0\ntask: digits\nmodel: " + "{a: " * 2000 + "1" + "}" * 2000 + "\n"
ALIAS_INPUTS = {  # name -> (text, what the message says, the text of the line it names)
    "self-alias": (SELF_ALIAS, "the alias *a is inside the value its anchor &a names", "*a]"),
    "alias-bomb": (ALIAS_BOMB, "the alias *a3 makes the document expand to more than", "*a3"),
    "deep": (DEEP, "nests deeper than", "model:"),
}
ALIAS_ROUTES = ("sweep", "jobs-submit", "campaign-spec", "campaign-set")


def _alias_route(route: str, text: str, tmp: Path) -> tuple[Callable[[list[str]], int], list[str], Path]:
    """(the CLI's main, its argv, the file whose line the message must name) for one input taken one way."""
    from sptune.jobs.__main__ import main as jobs_main

    bad = tmp / "bad.yaml"
    bad.write_text(text)
    if route == "sweep":
        return sweep_main, [str(bad), "--dry-run", "--output", str(tmp / "out")], bad
    if route == "jobs-submit":
        return jobs_main, ["submit", str(bad), "--output", str(tmp / "out"), "--address", "http://127.0.0.1:9"], bad
    campaign = tmp / "campaign.yaml"
    if route == "campaign-spec":
        campaign.write_text(CAMPAIGN.format(name="c", spec=bad, study="d"))
        return sweep_main, [str(campaign), "--dry-run", "--output", str(tmp / "out")], bad
    # The input as a campaign's own text: its set: block holds the alias (or the nesting).
    head = CAMPAIGN.format(name="c", spec=DIGITS, study="d") + "    set:\n"
    body = "".join(f"      {line}\n" for line in text.splitlines() if not line.startswith(("name:", "seed:", "task:")))
    campaign.write_text(head + body)
    return sweep_main, [str(campaign), "--dry-run", "--output", str(tmp / "out")], campaign


@pytest.mark.parametrize("route", ALIAS_ROUTES)
@pytest.mark.parametrize("name", ALIAS_INPUTS)
def test_aliases_and_nesting_are_refused_at_once_naming_the_line(name, route, tmp_path, capsys):
    import time

    text, says, marker = ALIAS_INPUTS[name]
    main, argv, named = _alias_route(route, text, tmp_path)
    line = next(i for i, row in enumerate(named.read_text().splitlines(), 1) if marker in row)
    start = time.perf_counter()
    code = main(argv)
    seconds = time.perf_counter() - start
    printed = capsys.readouterr()
    printed = printed.out + printed.err
    assert code == 2, printed
    assert seconds < 1.0, f"refused after {seconds:.2f} s"
    assert "Traceback" not in printed and "Fix:" in printed, printed
    assert len(printed.strip().splitlines()) == 1, printed
    assert f"{named}:{line}:" in printed and says in printed, printed
    assert not (tmp_path / "out").exists()


def test_a_set_value_that_contains_itself_is_refused(capsys):
    assert sweep_main([str(DIGITS), "--dry-run", "--set", "model=&m {d_model: *m}"]) == 2
    printed = capsys.readouterr().err
    assert "--set model" in printed and "the alias *m is inside the value its anchor &m names" in printed


def test_the_ray_cluster_launcher_file_is_named_for_what_it_is(capsys):
    cluster = REPO / "sweeps" / "cluster.yaml"
    assert sweep_main([str(cluster), "--dry-run"]) == 2
    printed = capsys.readouterr().err
    assert f"{cluster}: this is a Ray cluster launcher file for `ray up`, not a sweep spec" in printed, printed
    assert f"ray up {cluster}" in printed and "python -m sptune.jobs submit" in printed
    assert "Field required" not in printed and len(printed.strip().splitlines()) == 1


def test_a_yaml_file_with_no_key_of_a_spec_is_named_as_not_a_spec(tmp_path, capsys):
    compose = tmp_path / "compose.yaml"
    compose.write_text("services:\n  web: {image: nginx}\n")
    other = tmp_path / "other.yaml"
    other.write_text("colour: blue\nsize: 3\n")
    assert sweep_main([str(compose), "--dry-run"]) == 2
    assert "this is a Docker Compose file, not a sweep spec" in capsys.readouterr().err
    assert sweep_main([str(other), "--dry-run"]) == 2
    printed = capsys.readouterr().err
    assert "not a sweep spec or a campaign: none of its top-level keys (colour, size)" in printed, printed
