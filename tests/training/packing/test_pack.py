"""Packs (pure PyTorch): K members trained as one fused model see exactly what they would see alone."""

from __future__ import annotations

import io
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from sptune.spec import load_spec
from sptune.tasks.base import ArraySplit, TaskInfo
from sptune.tasks.registry import TaskRequest, load_task
from sptune.training import loops
from sptune.training.device import autocast
from sptune.training.epoch_sums import EpochSums
from sptune.training.loops import EpochLoop, FinetuneLoop, OptimConfig, PretrainLoop, PretrainObjective
from sptune.training.model_configs import classifier_config
from sptune.training.models import ModelConfig
from sptune.training.models.encoder import EncoderConfig
from sptune.training.packing.pack import PackError, PackLoop, train_pack_steps
from sptune.training.rng_stream import MASK_SEED_OFFSET

pytestmark = pytest.mark.usefixtures("one_torch_thread")

STEPS = 200
TOLERANCE = 1e-5  # relative, on every step's loss and pre-clip gradient norm (what a pack promises)

# Three members of one stage: different lr, weight decay, warm-up and seed.
MEMBERS = [
    {"lr": 3e-3, "weight_decay": 0.0, "warmup_steps": 1, "seed": 3},
    {"lr": 1e-3, "weight_decay": 0.1, "warmup_steps": 20, "seed": 4},
    {"lr": 2e-3, "weight_decay": 0.01, "warmup_steps": 5, "seed": 5},
]


@pytest.fixture(scope="module")
def digits():
    """A tiny slice of the digits task: 200 steps in seconds."""
    data = load_task(TaskRequest("digits"))
    cut = lambda split, n: ArraySplit(np.asarray(split.x[:n]), np.asarray(split.y[:n]))  # noqa: E731
    return data.info, cut(data.train, 72), cut(data.val, 32)


def _encoder(info, dropout: float = 0.1) -> EncoderConfig:
    return EncoderConfig(d_model=16, n_layers=1, n_heads=2, d_ff=32, dropout=dropout, max_len=info.seq_len)


def _optim(member: dict, **overrides) -> OptimConfig:
    base = {"batch_size": 16, "epochs": 4, "steps": STEPS, "eval_every": 50, "grad_clip": 1.0, "device": "cpu"}
    return OptimConfig(**{**base, **member, **overrides})


def finetune(digits, member: dict, **overrides) -> FinetuneLoop:
    info, train, val = digits
    return FinetuneLoop(
        ModelConfig(_encoder(info), num_classes=info.num_classes), info, train, val, _optim(member, **overrides)
    )


def pretrain(digits, member: dict, **overrides) -> PretrainLoop:
    info, train, val = digits
    return PretrainLoop(
        _encoder(info), PretrainObjective("masked", 0.5, "l2"), info, train, val, _optim(member, **overrides)
    )


STAGES = pytest.mark.parametrize("make", [finetune, pretrain], ids=["finetune", "pretrain_masked"])


class Recorder:
    """What a loop drew: the batch indices, and (pretraining) the masks."""

    def __init__(self, loop: EpochLoop) -> None:
        self.indices: list[torch.Tensor] = []
        self.masks: list[torch.Tensor] = []
        next_batch, positions = loop.batches.next, getattr(loop, "_positions", None)

        def recorded_next() -> torch.Tensor:
            self.indices.append(next_batch().clone())
            return self.indices[-1]

        def recorded_positions(x, generator):
            where = positions(x, generator)
            if loop.model.training:  # training's masks, not validation's fixed ones
                self.masks.append(where.clone())
            return where

        loop.batches.next = recorded_next
        if positions is not None:
            loop._positions = recorded_positions


def _weights(loop: EpochLoop) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in loop.model.state_dict().items()}


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=TOLERANCE, abs_tol=1e-12)


def _solo_step(loop: EpochLoop) -> tuple[float, float]:
    """One training step of a solo loop, as its `train_steps` runs it, without the round's validation."""
    loop.model.train()
    sums = EpochSums(loop.device)
    with loop.rng.own():
        loop.train_step(sums)
    means = sums.means(loop.train_accuracy_key)
    return means["loss"], means["grad_norm"]


def _pack_step(pack: PackLoop) -> list[tuple[float, float]]:
    """One training step of every member of a pack, without validation."""
    for member in pack.members:
        member.model.train()
    sums = pack.new_sums()
    pack.train_step(pack.active(), sums)
    return [(s.means("acc")["loss"], s.means("acc")["grad_norm"]) for s in sums.split()]


@STAGES
def test_a_pack_of_three_matches_three_solo_trainings_step_by_step(digits, make):
    solos = [make(digits, m) for m in MEMBERS]
    members = [make(digits, m) for m in MEMBERS]
    solo_seen, pack_seen = [Recorder(s) for s in solos], [Recorder(m) for m in members]
    pack = PackLoop(members)
    for k, solo in enumerate(solos):
        for name, w in _weights(solo).items():
            assert torch.equal(w, _weights(pack.members[k])[name]), f"member {k}: initial {name} differs"
    pack_steps = list(zip(*(_pack_step(pack) for _ in range(STEPS)), strict=True))

    for k, solo in enumerate(solos):
        solo_steps = [_solo_step(solo) for _ in range(STEPS)]
        assert len(pack_seen[k].indices) == STEPS
        assert len(solo_seen[k].masks) == len(pack_seen[k].masks) == (STEPS if make is pretrain else 0)
        for i in range(STEPS):  # step by step: a wrong mask also changes the next pass's order (one generator)
            assert torch.equal(solo_seen[k].indices[i], pack_seen[k].indices[i]), (
                f"member {k}: batch differs at step {i}"
            )
            if make is pretrain:
                assert torch.equal(solo_seen[k].masks[i], pack_seen[k].masks[i]), (
                    f"member {k}: mask differs at step {i}"
                )
        for i, ((sl, sg), (pl, pg)) in enumerate(zip(solo_steps, pack_steps[k], strict=True)):
            assert _close(sl, pl), f"member {k} step {i}: loss {pl} in the pack, {sl} alone"
            assert _close(sg, pg), f"member {k} step {i}: grad norm {pg} in the pack, {sg} alone"
    # The members really differ: their own lr, warm-up and seed gave each its own run.
    assert len({round(steps[-1][0], 6) for steps in pack_steps}) == 3


def test_members_draw_masks_from_their_own_mask_generator_as_on_a_gpu(digits, monkeypatch):
    """On a GPU a trial's masks come from a generator of their own (`loops.mask_generator`), apart from the
    shuffles'; made so here on the CPU: each member's masks must come from it, as in its solo step, and its
    checkpoint must carry that stream to a solo loop."""
    own = lambda device, seed, shuffles: torch.Generator().manual_seed(seed + MASK_SEED_OFFSET)  # noqa: E731
    monkeypatch.setattr(loops, "mask_generator", own)
    make = lambda m: pretrain(digits, m, steps=20, eval_every=10)  # noqa: E731
    solos, members = [make(m) for m in MEMBERS], [make(m) for m in MEMBERS]
    assert all(m.mask_generator is not m.generator for m in members)
    solo_seen, pack_seen = [Recorder(s) for s in solos], [Recorder(m) for m in members]
    pack = PackLoop(members)
    first = pack.train_round()
    state = _through_a_file(members[2].state_dict())
    second = pack.train_round()
    for k, solo in enumerate(solos):
        for packed in (first, second):
            alone = solo.train_round()
            assert _close(packed[k]["loss"], alone["loss"]) and _close(packed[k]["val_loss"], alone["val_loss"])
        assert len(pack_seen[k].masks) == 20
        assert all(torch.equal(a, b) for a, b in zip(solo_seen[k].masks, pack_seen[k].masks, strict=True))
    assert "mask_generator" in state
    resumed = make(MEMBERS[2])
    resumed.load_state_dict(state)
    assert _close(resumed.train_round()["loss"], second[2]["loss"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_members_draw_masks_and_dropout_on_the_device_as_alone(digits):
    """On a GPU each member's masks come from its own generator there and its dropout from its CUDA stream (the
    noise drawn by the fused kernel on ones, outside vmap): the same masks and losses as alone. Losses to 1e-4
    only: TF32 products batched differently sum in another order; another dropout mask moves them far more."""
    make = lambda m: pretrain(digits, m, device="cuda", steps=20, eval_every=10)  # noqa: E731
    solos, members = [make(m) for m in MEMBERS], [make(m) for m in MEMBERS]
    assert all(m.mask_generator.device.type == "cuda" for m in members)
    solo_seen, pack_seen = [Recorder(s) for s in solos], [Recorder(m) for m in members]
    pack = PackLoop(members)
    rounds = [pack.train_round() for _ in range(2)]
    for k, solo in enumerate(solos):
        for packed in rounds:
            alone = solo.train_round()
            assert math.isclose(packed[k]["loss"], alone["loss"], rel_tol=1e-4), (k, packed[k], alone)
        assert len(pack_seen[k].masks) == 20
        assert all(torch.equal(a, b) for a, b in zip(solo_seen[k].masks, pack_seen[k].masks, strict=True))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@STAGES
def test_on_a_gpu_a_captured_pack_trains_as_the_eager_one_and_captures_again_when_a_member_leaves(digits, make):
    """training.compile: cuda_graphs in a pack: the fused step (stack, forward, backward, each member's clipping
    and AdamW) replays as one graph per full batch; the epoch's short batch runs eagerly. 72 rows at batch 16:
    4 full batches and one of 8. Epoch 1: 3 warm-up steps, the capture's first replay, the short batch; epoch 2:
    4 replays. A member stopping changes what the graph stacks: epoch 3 warms up and captures again."""
    build = lambda compile_setting: [  # noqa: E731
        make(digits, m, device="cuda", precision="fp32", steps=None, epochs=3, compile=compile_setting) for m in MEMBERS
    ]
    graphed, eager = PackLoop(build("cuda_graphs")), PackLoop(build(False))
    assert graphed.graphed and not eager.graphed
    for epoch in range(3):
        if epoch == 2:
            graphed.stop(0)
            eager.stop(0)
        got, want = graphed.train_round(), eager.train_round()
        assert sorted(got) == sorted(want)
        for k in want:
            for key in ("loss", "grad_norm", "lr", "val_loss"):
                assert math.isclose(got[k][key], want[k][key], rel_tol=1e-3), (epoch, k, key, got[k], want[k])
        replays = graphed._captured.replay_count
        assert replays == (1, 5, 1)[epoch], (epoch, replays)
    assert graphed.stacked == (1, 2) and eager._captured is None


def _through_a_file(state: dict) -> dict:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


@STAGES
def test_a_members_checkpoint_resumes_in_a_solo_loop_as_if_it_had_trained_alone(digits, make):
    straight = make(digits, MEMBERS[2])
    for _ in range(4):
        expected = straight.train_round()

    pack = PackLoop([make(digits, m) for m in MEMBERS])
    pack.train_round()
    pack.train_round()
    state = _through_a_file(pack.members[2].state_dict())  # the per-trial format a trainable saves

    torch.rand(100)  # a reused process's RNG is wherever the last trial left it
    resumed = make(digits, MEMBERS[2])
    resumed.load_state_dict(state)
    for _ in range(2):
        got = resumed.train_round()
    assert got["optimizer_steps"] == expected["optimizer_steps"] == STEPS
    assert _close(got["loss"], expected["loss"]) and _close(got["val_loss"], expected["val_loss"])
    # No per-weight comparison: the key bias's gradient is zero up to rounding (softmax ignores it), and AdamW
    # turns that rounding into step-sized moves; the losses are what the members must agree on.


@STAGES
def test_a_fused_pack_resumed_from_its_members_checkpoints_goes_on_as_the_uninterrupted_one_bit_for_bit(digits, make):
    """What a kill -9 mid-pack and --resume does to a fused pack (tests/e2e/test_packed_study.py runs it through
    Ray): each member reloads its per-trial checkpoint into a new loop, a new pack trains them on, and every
    number and weight is the uninterrupted pack's exactly, not within a tolerance (the same kernels, same order)."""
    budget = {"steps": 60, "eval_every": 20}
    straight = PackLoop([make(digits, m, **budget) for m in MEMBERS])
    straight.train_round()
    states = [_through_a_file(m.state_dict()) for m in straight.members]
    want = [straight.train_round() for _ in range(2)]

    torch.rand(100)  # a new process's RNG is wherever it is
    members = [make(digits, m, **budget) for m in MEMBERS]
    for member, state in zip(members, states, strict=True):
        member.load_state_dict(state)
    resumed = PackLoop(members)
    for got, expected in zip((resumed.train_round() for _ in range(2)), want, strict=True):
        for k in range(len(MEMBERS)):
            assert {**got[k], "epoch_seconds": 0} == {**expected[k], "epoch_seconds": 0}, k
    for k, member in enumerate(members):
        assert all(torch.equal(w, _weights(straight.members[k])[n]) for n, w in _weights(member).items()), k


def test_solo_checkpoints_resume_as_a_pack(digits):
    """The other way: members loaded from solo checkpoints (a resumed pack trial) go on as they would alone."""
    solos = [finetune(digits, m) for m in MEMBERS]
    for s in solos:
        s.train_round()
    states = [_through_a_file(s.state_dict()) for s in solos]
    members = [finetune(digits, m) for m in MEMBERS]
    for member, state in zip(members, states, strict=True):
        member.load_state_dict(state)
    packed = PackLoop(members).train_round()
    for k, s in enumerate(solos):
        alone = s.train_round()
        assert _close(packed[k]["loss"], alone["loss"]) and _close(packed[k]["val_acc"], alone["val_acc"])


@STAGES
def test_a_nan_in_one_member_marks_only_that_member_diverged(digits, make):
    members = [make(digits, m) for m in MEMBERS]
    solos = [make(digits, MEMBERS[k]) for k in (0, 2)]
    pack = PackLoop(members)
    first = pack.train_round()
    with torch.no_grad():
        next(members[1].model.parameters()).fill_(float("nan"))
    second = pack.train_round()
    assert second[1]["diverged"] == 1 and "loss became nan" in second[1]["error"]
    assert pack.status == ["training", "diverged", "training"]
    third = pack.train_round()
    assert sorted(third) == [0, 2]  # the frozen member trains no more
    for k, solo in zip((0, 2), solos, strict=True):
        for packed in (first, second, third):
            alone = solo.train_round()
            assert not packed[k].get("diverged") and math.isfinite(packed[k]["loss"])
            assert _close(packed[k]["loss"], alone["loss"]) and _close(packed[k]["grad_norm"], alone["grad_norm"])


def test_a_stopped_member_leaves_the_pack_and_the_others_go_on(digits):
    members = [finetune(digits, m) for m in MEMBERS]
    pack = PackLoop(members)
    pack.train_round()
    pack.stop(0)
    steps_before = members[0].optimizer_steps
    weights_before = _weights(members[0])
    assert sorted(pack.train_round()) == [1, 2]
    assert members[0].optimizer_steps == steps_before
    assert all(torch.equal(w, _weights(members[0])[n]) for n, w in weights_before.items())


def test_the_benchmarks_entry_point_trains_a_pack_for_n_steps(digits):
    results = train_pack_steps([pretrain(digits, m) for m in MEMBERS[:2]], 3)
    assert [r["status"] for r in results] == ["training", "training"]
    assert [r["optimizer_steps"] for r in results] == [3, 3]
    assert all(math.isfinite(r["val_loss"]) and "epoch_seconds" not in r for r in results)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda cfg: replace(cfg, batch_size=8), "batch_size"),
        (lambda cfg: replace(cfg, steps=100), "budget"),
    ],
)
def test_loops_of_different_settings_are_refused_naming_the_setting(digits, change, field):
    info, train, val = digits
    odd = FinetuneLoop(
        ModelConfig(_encoder(info), num_classes=info.num_classes), info, train, val, change(_optim(MEMBERS[1]))
    )
    with pytest.raises(PackError, match=field):
        PackLoop([finetune(digits, MEMBERS[0]), odd])


@pytest.mark.parametrize(
    "change", [{"dropout": 0.2}, {"attention_kernel": "sdpa"}], ids=["dropout", "attention_kernel"]
)
def test_models_differing_where_no_parameter_shows_are_refused(digits, change):
    """The lead's model runs every member's forward: a member's own dropout rate or kernel would be ignored."""
    info, train, val = digits
    cfg = ModelConfig(replace(_encoder(info), **change), num_classes=info.num_classes)
    odd = FinetuneLoop(cfg, info, train, val, _optim(MEMBERS[1]))
    with pytest.raises(PackError, match="architecture"):
        PackLoop([finetune(digits, MEMBERS[0]), odd])


def test_loops_on_different_rows_are_refused(digits):
    info, train, val = digits
    other = ArraySplit(train.x[::-1].copy(), train.y[::-1].copy())
    odd = FinetuneLoop(ModelConfig(_encoder(info), num_classes=info.num_classes), info, other, val, _optim(MEMBERS[1]))
    with pytest.raises(PackError, match="different data"):
        PackLoop([finetune(digits, MEMBERS[0]), odd])


def test_attention_dropout_is_refused(digits):
    info, train, val = digits
    cfg = ModelConfig(replace(_encoder(info), attention_dropout=0.1), num_classes=info.num_classes)
    loops = [FinetuneLoop(cfg, info, train, val, _optim(m)) for m in MEMBERS[:2]]
    with pytest.raises(PackError, match="attention_dropout"):
        PackLoop(loops)


TOKENS = TaskInfo(name="tok", input_kind="tokens", seq_len=16, num_classes=3, vocab_size=12)


def _token_split(n: int, seed: int) -> ArraySplit:
    rng = np.random.default_rng(seed)
    x = rng.integers(2, TOKENS.vocab_size, (n, TOKENS.seq_len))
    x[: n // 2, -4:] = TOKENS.pad_id  # half the rows padded: the key-padding path
    return ArraySplit(x.astype("int64"), rng.integers(0, 3, n))


@pytest.mark.parametrize("kind", ["causal_digits", "masked_tokens"])
def test_other_objectives_and_inputs_match_solo_runs_too(digits, kind):
    """Shorter runs: causal pretraining (no mask draw) and token inputs with padding (embedding, key padding). The
    SSM family does not pack (refused at --dry-run: its layers have no stacked form)."""
    if kind == "causal_digits":
        info, train, val = digits
        objective, encoder = PretrainObjective("causal", 0.5, "l2"), _encoder(info)
    else:
        info, train, val = TOKENS, _token_split(48, 0), _token_split(16, 1)
        objective = PretrainObjective("masked", 0.5, "ce")
        encoder = replace(_encoder(info), input_kind="tokens", vocab_size=TOKENS.vocab_size, positions="rotary")

    def make(member: dict) -> PretrainLoop:
        return PretrainLoop(encoder, objective, info, train, val, _optim(member, steps=20, eval_every=5))

    solos, pack = [make(m) for m in MEMBERS], PackLoop([make(m) for m in MEMBERS])
    for _ in range(4):
        packed = pack.train_round()
        for k, solo in enumerate(solos):
            alone = solo.train_round()
            for key in ("loss", "grad_norm", "val_loss"):
                assert _close(packed[k][key], alone[key]), (k, key, packed[k][key], alone[key])


CALL_B_SPEC = Path(__file__).resolve().parents[3] / "search_spaces" / "cifar_1layer_gpu.yaml"
ON_EACH_DEVICE = pytest.mark.parametrize(
    "device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU"))]
)


@ON_EACH_DEVICE
@pytest.mark.parametrize("stage", ["finetune", "pretrain"])
def test_a_two_member_pack_s_forward_and_backward_match_two_solo_trials_on_call_b_s_model(device, stage):
    """Device call A's first GPU work (tools/device/call_a.sh): call B's model (1,024 tokens, d64, 4 heads, rotary,
    max pooling) at its precision, bf16 on a GPU, where attention runs on the kernel one trial's rule picks there
    (cuDNN on a Hopper): each member's loss and gradients as its solo trial's on the same batch. On a GPU within
    bf16's rounding (matmuls batched differently round differently), on a CPU within fp32's."""
    spec = load_spec(CALL_B_SPEC)
    tokens = 1024 if device == "cuda" else 128  # a CPU checks the code path, at a CPU's length
    info = TaskInfo("pixels", "continuous", tokens, 10, levels=256)
    rng = np.random.default_rng(0)
    split = lambda n: ArraySplit(rng.integers(0, 256, (n, tokens), dtype=np.uint8), rng.integers(0, 10, n))  # noqa: E731
    train, val = split(8), split(2)
    model = classifier_config(spec.model, info)
    precision = "bf16" if device == "cuda" else "fp32"
    objective = PretrainObjective(spec.pretrain.objective, spec.pretrain.mask_ratio, spec.pretrain.loss)

    def make(seed: int) -> EpochLoop:
        optim = OptimConfig(
            lr=1e-3, seed=seed, batch_size=4, epochs=1, grad_clip=0.0, device=device, precision=precision
        )
        if stage == "finetune":
            return FinetuneLoop(model, info, train, val, optim)
        return PretrainLoop(model.encoder, objective, info, train, val, optim)

    solos, pack = [make(3), make(4)], PackLoop([make(3), make(4)])
    pack.template.train()
    inputs = pack.draw_inputs(pack.members)
    packed = pack.forward_backward(len(inputs), inputs)
    loss_tol, grad_tol = (2e-2, 5e-2) if device == "cuda" else (1e-5, 1e-4)
    for k, solo in enumerate(solos):
        solo.model.train()
        drawn = solo.batch_inputs(solo.batches.next())
        with autocast(solo.device, solo.cfg.precision):
            alone = solo.forward_batch(*drawn)
        alone.loss.backward()
        assert math.isclose(float(packed.loss[k]), float(alone.loss), rel_tol=loss_tol), (k, packed.loss, alone.loss)
        assert int(packed.hits[k]) == int(alone.hits) or device == "cuda"
        got = torch.cat([leaf.grad[k].flatten().float() for leaf in pack.params.leaves])
        want = torch.cat([solo.model.get_parameter(n).grad.flatten().float() for n in pack.params.names])
        assert float((got - want).norm() / want.norm()) <= grad_tol, k


@pytest.mark.parametrize("paired", [False, True], ids=["listops_like", "retrieval_like"])
def test_padded_token_tasks_finetune_in_a_pack_as_alone(paired):
    """ListOps / Text / Retrieval: token inputs with padding (the key-padding mask into SDPA on the members' folded
    rows, mean pooling over real tokens), and Retrieval's two documents an example, each member as its solo run."""
    train, val = _token_split(48, 0), _token_split(16, 1)
    if paired:  # two padded documents an example
        train = ArraySplit(np.stack([train.x, train.x[::-1]], axis=1), train.y)
        val = ArraySplit(np.stack([val.x, val.x[::-1]], axis=1), val.y)
    encoder = replace(_encoder(TOKENS), input_kind="tokens", vocab_size=TOKENS.vocab_size, positions="learned")
    model = ModelConfig(encoder, num_classes=TOKENS.num_classes, paired=paired)

    def make(member: dict) -> FinetuneLoop:
        return FinetuneLoop(model, TOKENS, train, val, _optim(member, steps=8, eval_every=4))

    solos, pack = [make(m) for m in MEMBERS], PackLoop([make(m) for m in MEMBERS])
    assert pack.members[0].padded
    for _ in range(2):
        packed = pack.train_round()
        for k, solo in enumerate(solos):
            alone = solo.train_round()
            for key in ("loss", "grad_norm", "val_loss", "val_acc"):
                assert _close(packed[k][key], alone[key]), (k, key, packed[k][key], alone[key])
