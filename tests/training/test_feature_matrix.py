"""The feature matrix: every model family x every variant kind it supports x every input kind (tokens, continuous
values, paired token documents), and pretraining with both SPT objectives and each of their losses, trained for a
few optimizer steps through the trials' own jobs (`sptune.tuning.trial_jobs`: spec -> model config -> variant
builder -> loop), on CPU, without Ray.

Each cell asserts finite losses, that exactly the parameters its kind trains move (the frozen ones stay
bit-identical), that an SPT kind starts from its checkpoint, and that a checkpoint round-trips: saved, loaded the
way the final evaluation (or a resumed trial) loads it, it gives the same outputs. Kinds a family does not support
are refused at --dry-run instead (tests/test_bad_inputs.py).

The data are tiny random arrays shaped as each input kind's tasks shape theirs; the spec's task is only the name its
checks need (the jobs read the data they are given).
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from sptune.rules.budgets import Budget
from sptune.spec import KINDS
from sptune.spec.variant_kinds import as_built
from sptune.tasks.base import ArraySplit, TaskInfo, TaskSplits
from sptune.training.checkpoint_files import STATE_FILE
from sptune.training.final_scores import accuracy_on
from sptune.training.models import Classifier
from sptune.training.scoring import score
from sptune.tuning.trial_jobs import Finetuning, Pretraining
from tests.helpers_matrix import build_spec, model_families, supported_kinds

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SEQ, CLASSES, VOCAB, LEVELS = 12, 3, 12, 17
INFOS = {
    "tokens": TaskInfo(name="tokens", input_kind="tokens", seq_len=SEQ, num_classes=CLASSES, vocab_size=VOCAB),
    "continuous": TaskInfo(
        name="continuous",
        input_kind="continuous",
        seq_len=SEQ,
        num_classes=CLASSES,
        levels=LEVELS,
        value_mean=0.5,
        value_std=0.3,
    ),
    "paired": TaskInfo(
        name="paired", input_kind="tokens", seq_len=SEQ, num_classes=CLASSES, vocab_size=VOCAB, paired=True
    ),
}
# Token tasks are scored with cross-entropy only (the preflight refuses l1/l2 on tokens).
LOSSES = {"tokens": ("ce",), "continuous": ("ce", "l1", "l2"), "paired": ("ce",)}
OBJECTIVES = ("masked", "causal")
# Two optimizer steps of batch 8 over 16 rows, then one validation: enough to move every trained parameter.
BUDGET = Budget("steps", 2, 2)
TRIAL = {"lr": 1e-2, "batch_size": 8, "seed": 0}


def _split(info: TaskInfo, rows: int, seed: int) -> ArraySplit:
    """Random rows of the input kind: token ids above the specials with a padded tail (pad_id), or value levels."""
    rng = np.random.default_rng(seed)
    shape = (rows, 2, SEQ) if info.paired else (rows, SEQ)
    if info.input_kind == "continuous":
        x = rng.integers(0, LEVELS, shape).astype(np.uint8)
    else:
        x = rng.integers(2, VOCAB, shape).astype(np.int64)
        lengths = rng.integers(SEQ // 2, SEQ + 1, shape[:-1])
        x[np.arange(SEQ) >= lengths[..., None]] = info.pad_id
    return ArraySplit(x, rng.integers(0, CLASSES, rows).astype(np.int64))


def _sealed() -> ArraySplit:
    raise AssertionError("the matrix never reads a test split")


def _data(input_kind: str) -> TaskSplits:
    info = INFOS[input_kind]
    return TaskSplits(info, _split(info, 16, 0), _split(info, 8, 1), _sealed)


def _save(state: dict, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(state, folder / STATE_FILE)
    return folder


def _through_a_file(state: dict) -> dict:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


def _weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: param.detach().clone() for name, param in model.named_parameters()}


def _moved(before: dict[str, torch.Tensor], model: torch.nn.Module) -> set[str]:
    return {name for name, param in model.named_parameters() if not torch.equal(param.detach(), before[name])}


def _finite(metrics: dict) -> None:
    for key in ("loss", "val_loss", "grad_norm"):
        assert math.isfinite(metrics[key]), (key, metrics)


def _pretraining(family: str, input_kind: str, objective: str, loss: str) -> Pretraining:
    spec = build_spec(family, ["spt"], objective, loss)
    return Pretraining(spec, _data(input_kind), {**TRIAL, "objective": objective}, BUDGET)


# ---------------------------------------------------------------- pretraining: both objectives, each loss
PRETRAIN_CELLS = [
    (family, input_kind, objective, loss)
    for family in model_families()
    for input_kind in INFOS
    for objective in OBJECTIVES
    for loss in LOSSES[input_kind]
]


@pytest.mark.parametrize(
    ("family", "input_kind", "objective", "loss"), PRETRAIN_CELLS, ids=["-".join(cell) for cell in PRETRAIN_CELLS]
)
def test_pretraining_trains_every_parameter_and_round_trips(family, input_kind, objective, loss):
    job = _pretraining(family, input_kind, objective, loss)
    loop = job.loop
    assert loop.model.encoder.cfg.family == family
    before = _weights(loop.model)
    metrics = loop.train_round()
    _finite(metrics)
    assert metrics["optimizer_steps"] == 2
    assert _moved(before, loop.model) == set(before)  # pretraining trains the whole model

    state = _through_a_file(loop.state_dict())
    restored = _pretraining(family, input_kind, objective, loss).loop
    restored.load_state_dict(state)
    assert restored.validate() == loop.validate()


# ---------------------------------------------------------------- finetuning: every kind each family supports
# Inside each block, what these kinds keep frozen (sptune.spec.variant_kinds' table, written out here).
FROZEN_IN_BLOCKS = {"frozen_attn": ("attn",), "frozen_attn_mlp": ("attn", "mlp"), "spt_frozen": ("attn", "ssm", "mlp")}
# A frozen language model still trains its norms and positions (Lu et al.); GPT-2 names them ln_* and wpe.
FROZEN_BACKBONE = ("fpt_frozen", "frozen_random")
TRAINED_IN_BACKBONE = ("ln_", "wpe")
# Inputs reach a language model as embeddings (`inputs_embeds`): its own token table never gets a gradient.
NEVER_USED = {"backbone.wte.weight"}


def trains(kind: str, name: str) -> bool:
    """Whether the kind trains the parameter ``name`` of its model."""
    if kind in FROZEN_BACKBONE and name.startswith("backbone."):
        return any(part in name for part in TRAINED_IN_BACKBONE)
    parts = name.split(".")
    in_block = name.startswith("encoder.blocks.") and len(parts) > 3
    return not (in_block and parts[3] in FROZEN_IN_BLOCKS.get(kind, ()))


def _objectives(kind: str) -> tuple[str | None, ...]:
    """The pretraining objectives a kind is trained after: both where it follows pretrain.objective."""
    return OBJECTIVES if KINDS[kind].follows_pretrain_objective else (KINDS[kind].pretraining,)


FINETUNE_CELLS = [
    (family, input_kind, kind, objective)
    for family in model_families()
    for input_kind in INFOS
    for kind in supported_kinds(family)
    for objective in _objectives(kind)
]


@pytest.fixture(scope="module")
def language_model(tmp_path_factory) -> str:
    pytest.importorskip("transformers")
    from sptune.training.models.lm import make_tiny_gpt2

    return str(make_tiny_gpt2(tmp_path_factory.mktemp("tiny_gpt2")))


@pytest.fixture(scope="module")
def spt_checkpoints(tmp_path_factory):
    """The checkpoint folder of a pretraining on (family, input kind, objective), and its model's weights; trained
    once, when first asked."""
    root, made = tmp_path_factory.mktemp("spt"), {}

    def checkpoint(family: str, input_kind: str, objective: str) -> tuple[str, dict[str, torch.Tensor]]:
        key = (family, input_kind, objective)
        if key not in made:
            loop = _pretraining(family, input_kind, objective, LOSSES[input_kind][-1]).loop
            loop.train_round()
            state = loop.state_dict()
            made[key] = str(_save(state, root / "-".join(key))), state["model"]
        return made[key]

    return checkpoint


def _check_initialisation(kind: str, model: torch.nn.Module, spt_model: dict[str, torch.Tensor]) -> None:
    pretrained = {k.removeprefix("encoder."): v for k, v in spt_model.items() if k.startswith("encoder.")}
    own = model.encoder.state_dict()
    same = {k for k in own if torch.equal(own[k], pretrained[k])}
    if kind == "qk_init":
        assert same >= {k for k in own if ".attn.query." in k or ".attn.key." in k}
        assert "blocks.0.attn.value.weight" not in same and "blocks.0.mlp.0.weight" not in same
    else:  # spt, spt_causal, spt_frozen, and spt_cross on a checkpoint of the same shapes
        assert same == set(own)


@pytest.mark.parametrize(
    ("family", "input_kind", "kind", "objective"),
    FINETUNE_CELLS,
    ids=["-".join(str(part) for part in cell) for cell in FINETUNE_CELLS],
)
def test_finetuning_trains_what_the_kind_says_and_round_trips(
    family, input_kind, kind, objective, spt_checkpoints, request, tmp_path
):
    facts = as_built(KINDS[kind], objective)
    lm_path = request.getfixturevalue("language_model") if facts.language_model else "unused"
    spec = build_spec(family, [kind], objective or "masked", lm_path=lm_path)
    data = _data(input_kind)
    config = {**TRIAL, "variant": kind}
    if facts.pretraining is not None:
        config["spt_checkpoint"], spt_model = spt_checkpoints(family, input_kind, facts.pretraining)
    job = Finetuning(spec, data, config, BUDGET)
    model = job.loop.model

    if facts.language_model:
        assert not isinstance(model, Classifier)
    else:
        assert model.encoder.cfg.family == family and model.cfg.causal == (facts.architecture == "causal")
    if facts.pretraining is not None:
        _check_initialisation(kind, model, spt_model)
    names = [name for name, _ in model.named_parameters()]
    assert {n for n, p in model.named_parameters() if p.requires_grad} == {n for n in names if trains(kind, n)}
    if kind in FROZEN_IN_BLOCKS or kind in FROZEN_BACKBONE:
        assert not all(trains(kind, n) for n in names)  # the kind freezes something in this model

    before = _weights(model)
    metrics = job.loop.train_round()
    _finite(metrics)
    assert _moved(before, model) == {n for n in names if trains(kind, n)} - NEVER_USED

    # The final evaluation's path: the checkpoint's file, the variant's model rebuilt from the spec, its state loaded.
    folder = _save(job.loop.state_dict(), tmp_path / "checkpoint")
    val = data.val
    expected = score(model, data.info, torch.from_numpy(val.x), torch.from_numpy(val.y), torch.device("cpu"))
    assert accuracy_on(spec, data.info, str(folder), val, kind)[:2] == expected
