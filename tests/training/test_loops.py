"""The epoch loops (pure PyTorch): exact resume, per-epoch metrics, AdamW parameter groups."""

from __future__ import annotations

import io
import math
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from sptune.tasks.base import ArraySplit, TaskInfo
from sptune.training.loops import FinetuneLoop, OptimConfig, PretrainLoop, PretrainObjective
from sptune.training.models import ModelConfig
from sptune.training.models.encoder import EncoderConfig
from sptune.training.scoring import score
from sptune.training.variants import build_model

INFO = TaskInfo(name="px", input_kind="continuous", seq_len=16, num_classes=3, levels=17)
TOKENS = TaskInfo(name="tok", input_kind="tokens", seq_len=16, num_classes=3, vocab_size=12)


def _split(n: int, seed: int, info: TaskInfo = INFO) -> ArraySplit:
    rng = np.random.default_rng(seed)
    high = info.vocab_size if info.input_kind == "tokens" else info.levels
    low = 2 if info.input_kind == "tokens" else 0  # no padding / mask ids in token data
    return ArraySplit(rng.integers(low, high, (n, info.seq_len)).astype("int64"), rng.integers(0, 3, n))


TRAIN, VAL = _split(32, 0), _split(16, 1)


# Tiny models: a second thread only adds contention on a shared machine (conftest.py).
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _encoder(dropout: float = 0.2, **overrides) -> EncoderConfig:
    base = dict(d_model=16, n_layers=1, n_heads=2, d_ff=32, dropout=dropout, max_len=INFO.seq_len)
    return EncoderConfig(**{**base, **overrides})


def _optim(**overrides) -> OptimConfig:
    return OptimConfig(**{"lr": 1e-2, "batch_size": 8, "epochs": 4, "seed": 3, "device": "cpu", **overrides})


def _finetune(dropout: float = 0.2, **optim) -> FinetuneLoop:
    return FinetuneLoop(ModelConfig(_encoder(dropout), num_classes=3), INFO, TRAIN, VAL, _optim(**optim))


def _pretrain(dropout: float = 0.2, **optim) -> PretrainLoop:
    return PretrainLoop(_encoder(dropout), PretrainObjective("masked", 0.5, "l2"), INFO, TRAIN, VAL, _optim(**optim))


# ---------------------------------------------------------------- exact resume


def _through_a_file(state: dict) -> dict:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


@pytest.mark.parametrize("make_loop", [_finetune, _pretrain], ids=["finetune", "pretrain_masked"])
def test_a_resumed_loop_ends_with_the_same_weights_as_one_never_interrupted(make_loop):
    straight = make_loop()
    for _ in range(4):
        straight.train_epoch()

    first_half = make_loop()
    for _ in range(2):
        first_half.train_epoch()
    state = _through_a_file(first_half.state_dict())
    del first_half

    torch.rand(1000)  # a reused Ray actor's process RNG is wherever the last trial left it
    resumed = make_loop()
    resumed.load_state_dict(state)
    torch.rand(77)  # ... and anything may draw from it between restore and training
    for _ in range(2):
        resumed.train_epoch()

    assert resumed.epoch == straight.epoch == 4
    for name, tensor in straight.model.state_dict().items():
        assert torch.equal(resumed.model.state_dict()[name], tensor), name


# ---------------------------------------------------------------- per-epoch metrics


def _expected_lr(cfg: OptimConfig, step: int, total: int) -> float:
    """Linear warm-up then cosine decay, written out independently of the schedule code."""
    warmup = max(1, int(total * cfg.warmup_fraction))
    if step < warmup:
        return cfg.lr * (step + 1) / warmup
    return cfg.lr * 0.5 * (1 + math.cos(math.pi * (step - warmup) / (total - warmup)))


def test_finetune_reports_lr_grad_norm_loss_and_train_accuracy():
    loop = _finetune(warmup_fraction=0.25)
    steps_per_epoch, total = 4, 16  # 32 examples, batches of 8, 4 epochs
    for epoch in range(1, 5):
        metrics = loop.train_epoch()
        assert {"loss", "train_acc_running", "lr", "grad_norm"} <= set(metrics)
        last_step = epoch * steps_per_epoch - 1
        assert metrics["lr"] == pytest.approx(_expected_lr(loop.cfg, last_step, total), rel=1e-9)
        assert math.isfinite(metrics["grad_norm"]) and metrics["grad_norm"] > 0
        assert 0.0 <= metrics["train_acc_running"] <= 1.0
        assert math.isfinite(metrics["loss"])


def test_pretrain_reports_masked_train_accuracy_and_grad_norm():
    metrics = _pretrain().train_epoch()
    assert {"loss", "train_masked_acc", "lr", "grad_norm"} <= set(metrics)
    assert 0.0 <= metrics["train_masked_acc"] <= 1.0
    assert math.isfinite(metrics["grad_norm"]) and metrics["grad_norm"] > 0


def test_train_accuracy_counts_the_training_batches():
    """With lr 0 and no dropout the weights stay put: train_acc is the accuracy on the training split."""
    loop = _finetune(dropout=0.0, lr=0.0)
    metrics = loop.train_epoch()
    loss, acc = score(loop.model, INFO, loop.train_x, loop.train_y, loop.device)
    assert metrics["train_acc_running"] == pytest.approx(acc, abs=1 / len(TRAIN) + 1e-9)
    assert metrics["loss"] == pytest.approx(loss, rel=1e-4)


def test_grad_norm_is_measured_before_clipping():
    clipped = _finetune(grad_clip=1e-4).train_epoch()["grad_norm"]
    assert clipped > 100 * 1e-4  # after clipping it could be at most 1e-4
    unclipped = _finetune(grad_clip=0.0).train_epoch()["grad_norm"]
    never_reached = _finetune(grad_clip=1e6).train_epoch()["grad_norm"]
    assert unclipped == pytest.approx(never_reached, rel=1e-5)  # both ways of measuring agree


# ---------------------------------------------------------------- parameter groups


def _groups(loop: FinetuneLoop) -> tuple[list[nn.Parameter], list[nn.Parameter]]:
    decayed = [g for g in loop.optimizer.param_groups if g["weight_decay"] > 0]
    plain = [g for g in loop.optimizer.param_groups if g["weight_decay"] == 0]
    return [p for g in decayed for p in g["params"]], [p for g in plain for p in g["params"]]


def _decay_expected(model: nn.Module) -> set[int]:
    """Weights of the Linear layers that mix features (the input layer embeds values: no decay)."""
    return {
        id(m.weight)
        for m in model.modules()
        if isinstance(m, nn.Linear) and m is not model.encoder.embed and m.weight.requires_grad
    }


MODELS = {
    "continuous_cls_learned": (INFO, dict(use_cls=True, positions="learned"), "cls", "scratch"),
    "tokens_rotary": (TOKENS, dict(input_kind="tokens", vocab_size=12, positions="rotary"), "mean", "scratch"),
    "ssm": (INFO, dict(family="ssm", ssm_state=8), "mean", "scratch"),
    "frozen_attention": (INFO, {}, "mean", "frozen_attn"),
}


@pytest.mark.parametrize("name", MODELS)
def test_only_weight_matrices_are_decayed(name):
    info, encoder, pooling, kind = MODELS[name]
    cfg = ModelConfig(_encoder(**encoder), pooling=pooling, num_classes=3)
    torch.manual_seed(0)
    model = build_model(kind, cfg)
    loop = FinetuneLoop(cfg, info, _split(8, 0, info), _split(8, 1, info), _optim(weight_decay=0.1), model=model)
    decayed, plain = _groups(loop)

    trainable = [p for p in model.parameters() if p.requires_grad]
    together = decayed + plain
    assert len({id(p) for p in together}) == len(together), "a parameter in two groups"
    assert {id(p) for p in together} == {id(p) for p in trainable}, "groups are not the trainable parameters"
    assert {id(p) for p in decayed} == _decay_expected(model)

    never = [p for m in model.modules() for p in m.parameters(recurse=False) if not isinstance(m, nn.Linear)]
    never += [m.bias for m in model.modules() if isinstance(m, nn.Linear)]  # biases
    never += list(model.encoder.embed.parameters())  # token or value embedding
    plain_ids = {id(p) for p in plain}
    for param in never:
        assert not param.requires_grad or id(param) in plain_ids
    if isinstance(model.encoder.positions, nn.Parameter):  # learned; a fixed table is a buffer
        assert id(model.encoder.positions) in plain_ids
    if model.encoder.cls is not None:
        assert id(model.encoder.cls) in plain_ids


def test_language_model_groups_decay_conv1d_weights_not_embeddings_or_norms(tmp_path):
    pytest.importorskip("transformers")
    from sptune.training.models.lm import make_tiny_gpt2

    cfg = ModelConfig(_encoder(), num_classes=3)
    model = build_model("unfrozen_random", cfg, lm_path=str(make_tiny_gpt2(tmp_path / "lm")))
    loop = FinetuneLoop(cfg, INFO, TRAIN, VAL, _optim(weight_decay=0.1), model=model)
    decayed, plain = _groups(loop)
    names = {id(p): n for n, p in model.named_parameters()}
    decayed_names = {names[id(p)] for p in decayed}
    assert "backbone.h.0.attn.c_attn.weight" in decayed_names and "head.mlp.0.weight" in decayed_names
    plain_names = {names[id(p)] for p in plain}
    for name in ("embed.weight", "backbone.wpe.weight", "backbone.h.0.ln_1.weight", "backbone.h.0.attn.c_attn.bias"):
        assert name in plain_names


def test_weight_decay_shrinks_weights_but_never_biases():
    loop = _finetune(weight_decay=0.5, lr=0.1)
    linear = loop.model.head.mlp[0]
    weight, bias = linear.weight.detach().clone(), linear.bias.detach().clone()
    norm = loop.model.encoder.norm.weight.detach().clone()
    for param in loop.model.parameters():
        param.grad = torch.zeros_like(param)  # Adam's update is 0: only decay can move anything
    lr = loop.optimizer.param_groups[0]["lr"]
    loop.optimizer.step()
    assert torch.equal(linear.bias, bias) and torch.equal(loop.model.encoder.norm.weight, norm)
    assert torch.allclose(linear.weight, weight * (1 - lr * 0.5))


def test_adamw_gets_betas_and_eps():
    loop = _finetune(betas=(0.8, 0.95), eps=1e-6)
    for group in loop.optimizer.param_groups:
        assert group["betas"] == (0.8, 0.95) and group["eps"] == 1e-6


# ---------------------------------------------------------------- shared, read-only splits


def _read_only(split: ArraySplit, dtype: str) -> ArraySplit:
    """The split as trials receive it: read-only views of shared memory, compacted ids (int16)."""
    x, y = split.x.astype(dtype), split.y.copy()
    x.flags.writeable = y.flags.writeable = False
    return ArraySplit(x, y)


SHARED_LOOPS = {
    "finetune_pixels": lambda tr, va, info: FinetuneLoop(
        ModelConfig(_encoder(), num_classes=3), info, tr, va, _optim()
    ),
    "masked_pixels": lambda tr, va, info: PretrainLoop(
        _encoder(), PretrainObjective("masked", 0.5, "l2"), info, tr, va, _optim()
    ),
    "masked_tokens": lambda tr, va, info: PretrainLoop(
        _encoder(input_kind="tokens", vocab_size=12), PretrainObjective("masked", 0.5, "ce"), info, tr, va, _optim()
    ),
    "causal_tokens": lambda tr, va, info: PretrainLoop(
        _encoder(input_kind="tokens", vocab_size=12), PretrainObjective("causal", 0.5, "ce"), info, tr, va, _optim()
    ),
}


@pytest.mark.parametrize("name", SHARED_LOOPS)
def test_loops_train_on_read_only_shared_splits_without_copying_writing_or_changing_a_batch(name):
    info = TOKENS if "tokens" in name else INFO
    dtype = "int16" if "tokens" in name else "uint8"  # as compacted / stored
    train, val = _split(32, 0, info), _split(16, 1, info)
    shared_train, shared_val = _read_only(train, dtype), _read_only(val, dtype)
    kept = [a.copy() for a in (shared_train.x, shared_train.y, shared_val.x, shared_val.y)]
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*not writable")  # handled deliberately, not leaked
        loop = SHARED_LOOPS[name](shared_train, shared_val, info)
    # The loop trains on the arrays' own memory: one copy per node, not one per trial.
    assert loop.train_x.data_ptr() == shared_train.x.ctypes.data
    assert loop.val_x.data_ptr() == shared_val.x.ctypes.data
    shared = [loop.train_epoch() for _ in range(2)]
    # Nothing wrote into the shared arrays (numpy's read-only flag does not stop torch).
    for before, now in zip(kept, (shared_train.x, shared_train.y, shared_val.x, shared_val.y), strict=True):
        assert np.array_equal(before, now)
    # Same seed, same batches, same numbers as private writable int64 arrays.
    private = SHARED_LOOPS[name](train, val, info)
    expected = [private.train_epoch() for _ in range(2)]
    for got, want in zip(shared, expected, strict=True):
        assert {**got, "epoch_seconds": 0} == {**want, "epoch_seconds": 0}


# ---------------------------------------------------------------- CPU step speed-ups (no maths change)


def _weights(loop) -> list[torch.Tensor]:
    return [p.detach().clone() for p in loop.model.parameters()]


_ADAMW = torch.optim.AdamW


def _unfused_adamw(*args, **kwargs) -> torch.optim.AdamW:
    """PyTorch's unfused AdamW, whatever the loop asks for (patched over torch.optim.AdamW)."""
    return _ADAMW(*args, **{**kwargs, "fused": False})


def test_fused_adamw_on_cpu_makes_the_unfused_update_up_to_float_rounding(monkeypatch):
    """The same gradients give the same weights and moments, step after step. (Whole training runs
    drift apart slowly: Adam divides by sqrt(v), which magnifies the last bit of a tiny gradient.)"""
    fused = _finetune()
    assert fused.optimizer.defaults["fused"] is True
    monkeypatch.setattr(torch.optim, "AdamW", _unfused_adamw)
    unfused = _finetune()
    assert not unfused.optimizer.defaults["fused"]
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        for p_fused, p_unfused in zip(fused.trainable, unfused.trainable, strict=True):
            p_fused.grad = torch.randn(p_fused.shape, generator=gen)
            p_unfused.grad = p_fused.grad.clone()
        fused.optimizer.step()
        unfused.optimizer.step()
    for p_fused, p_unfused in zip(fused.trainable, unfused.trainable, strict=True):
        torch.testing.assert_close(p_fused, p_unfused, rtol=1e-6, atol=1e-6)
        for key in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(fused.optimizer.state[p_fused][key], unfused.optimizer.state[p_unfused][key])


def test_a_checkpoint_of_the_unfused_optimizer_resumes_in_the_fused_one(monkeypatch):
    """A checkpoint written by PyTorch's unfused AdamW loads into the fused one and continues as it would have."""
    monkeypatch.setattr(torch.optim, "AdamW", _unfused_adamw)
    old = _finetune()
    assert not old.optimizer.defaults["fused"]
    old.train_epoch()
    saved = _through_a_file(old.state_dict())
    old.train_epoch()  # the run as it goes on with the unfused optimizer
    monkeypatch.undo()
    resumed = _finetune()
    resumed.load_state_dict(saved)
    assert resumed.optimizer.defaults["fused"] is True
    resumed.train_epoch()
    for w_resumed, w_old in zip(_weights(resumed), _weights(old), strict=True):
        torch.testing.assert_close(w_resumed, w_old, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- what an epoch counts and a checkpoint records


PAIRED = TaskInfo(name="pairs", input_kind="tokens", seq_len=16, num_classes=2, vocab_size=12, paired=True)


def test_tokens_seen_counts_both_sequences_of_a_paired_task():
    rng = np.random.default_rng(0)
    pairs = ArraySplit(rng.integers(2, 12, (24, 2, 16)).astype("int64"), rng.integers(0, 2, 24))
    tokens = _encoder(input_kind="tokens", vocab_size=12)
    cfg = ModelConfig(tokens, num_classes=2, paired=True)
    loop = FinetuneLoop(cfg, PAIRED, pairs, pairs, _optim())
    assert loop.train_epoch()["tokens_seen"] == 24 * 2 * 16  # two documents of 16 tokens per example
    single = _finetune()
    assert single.train_epoch()["tokens_seen"] == len(TRAIN) * INFO.seq_len
    # Pretraining serves each document of a pair as its own sequence: the same tokens, counted once each.
    pre = PretrainLoop(tokens, PretrainObjective("masked", 0.15, "ce"), PAIRED, pairs, pairs, _optim())
    assert pre.train_epoch()["tokens_seen"] == 24 * 2 * 16


def test_a_checkpoint_records_the_device_and_precision_its_trial_ran_with():
    state = _through_a_file(_finetune(precision="auto").state_dict())
    assert (state["device_in_use"], state["precision_in_use"]) == ("cpu", "fp32")
    bf16 = _through_a_file(_finetune(precision="bf16").state_dict())
    assert bf16["precision_in_use"] == "bf16"


@pytest.fixture
def torch_determinism_restored():
    before = (torch.are_deterministic_algorithms_enabled(), torch.backends.cudnn.deterministic,
              torch.backends.cudnn.benchmark)
    yield
    torch.use_deterministic_algorithms(before[0])
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = before[1:]


@pytest.mark.usefixtures("torch_determinism_restored")
def test_a_deterministic_loop_turns_on_torchs_deterministic_algorithms_and_cudnns_flags():
    torch.backends.cudnn.benchmark = True
    loop = _finetune(deterministic=True)
    assert torch.are_deterministic_algorithms_enabled()
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark
    loop.train_epoch()  # every op of an epoch has a deterministic implementation (else it raises)
    assert _pretrain(deterministic=True).train_epoch()["epoch"] == 1
    _finetune()  # the default turns them off again: a reused Ray actor keeps no earlier trial's setting
    assert not torch.are_deterministic_algorithms_enabled() and not torch.backends.cudnn.deterministic
# ---------------------------------------------------------------- budgets in optimizer steps


def _named_weights(loop) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in loop.model.state_dict().items()}


@pytest.mark.parametrize("make_loop", [_finetune, _pretrain], ids=["finetune", "pretrain_masked"])
def test_rounds_of_steps_continue_the_data_across_calls_like_whole_epochs(make_loop):
    # 32 rows at batch 8: 4 steps per epoch. 12 steps in rounds of 5, 5 and 2 cut passes mid-way: the
    # same batches, masks, dropout and schedule as 3 whole epochs, so the same weights.
    epochs = make_loop(epochs=3)
    for _ in range(3):
        epochs.train_epoch()
    steps = make_loop(epochs=3, steps=12, eval_every=5)
    reported = [steps.train_round() for _ in range(3)]
    assert [m["optimizer_steps"] for m in reported] == [5, 10, 12]
    assert [m["epoch"] for m in reported] == [1, 2, 3]  # the round, the trial's Tune iteration
    assert epochs.optimizer_steps == 12
    for name, tensor in _named_weights(epochs).items():
        assert torch.equal(steps.model.state_dict()[name], tensor), name


def test_the_schedule_spans_the_steps_whatever_the_batch_size():
    # The same 12 steps at batch 4 (8 steps per epoch) and batch 16 (2 per epoch): both end the cosine.
    for batch_size in (4, 16):
        loop = _finetune(batch_size=batch_size, epochs=4, steps=12, eval_every=4, warmup_fraction=0.0)
        for _ in range(3):
            last = loop.train_round()
        assert last["optimizer_steps"] == 12
        assert last["lr"] == pytest.approx(_expected_lr(loop.cfg, 11, 12))


def test_a_loop_resumed_mid_pass_ends_with_the_same_weights():
    straight = _finetune(steps=12, eval_every=5)
    for _ in range(3):
        straight.train_round()
    first = _finetune(steps=12, eval_every=5)
    first.train_round()  # 5 steps: one pass and a batch into the next
    state = _through_a_file(first.state_dict())
    assert state["data_cursor"] == 8 and state["optimizer_steps"] == 5
    resumed = _finetune(steps=12, eval_every=5)
    resumed.load_state_dict(state)
    for _ in range(2):
        resumed.train_round()
    assert resumed.optimizer_steps == 12
    for name, tensor in _named_weights(straight).items():
        assert torch.equal(resumed.model.state_dict()[name], tensor), name


def test_a_constant_schedule_holds_the_peak_after_its_warm_up_in_steps():
    loop = _finetune(schedule="constant", warmup_steps=3, epochs=4)  # 4 steps per epoch, 16 in all
    rates = []
    for _ in range(4):
        loop.train_epoch()
        rates.append(loop.last_lr)
    assert rates == pytest.approx([1e-2] * 4)  # past the 3 warm-up steps: the peak to the end
    cosine = _finetune(warmup_steps=3, epochs=4)
    cosine.train_epoch()
    cosine.train_epoch()
    assert cosine.last_lr < 1e-2 * 0.9  # the same warm-up, then decaying
    warming = _finetune(schedule="constant", warmup_steps=8, epochs=4)
    warming.train_epoch()
    assert warming.last_lr == pytest.approx(1e-2 * 4 / 8)  # step 4 of an 8-step linear warm-up


# ---------------------------------------------------------------- the step's waste cut


def test_the_gradient_norm_is_one_foreach_norm_call_per_step_and_the_norm_of_all_gradients(monkeypatch):
    loop = _finetune(grad_clip=0.0)
    calls = []
    real = torch._foreach_norm
    def counted(tensors, *args, **kwargs):
        calls.append(len(tensors))
        return real(tensors, *args, **kwargs)

    monkeypatch.setattr(torch, "_foreach_norm", counted)
    batch, grad_norm = loop.train_step_on(loop.batch_inputs(loop.batches.next()))
    grads = torch.cat([p.grad.flatten() for p in loop.trainable if p.grad is not None])
    assert calls == [len(loop.trainable)]  # every gradient in one call, not one norm per parameter
    torch.testing.assert_close(grad_norm, torch.linalg.vector_norm(grads), rtol=1e-6, atol=0)


def test_pretraining_never_gathers_labels():
    loop = _pretrain()
    loop.train_y = loop.train_y[:0]  # any gather from it would raise
    x, where = loop.batch_inputs(loop.batches.next())
    assert x.shape == where.shape == (8, INFO.seq_len) and where.dtype == torch.bool
    assert math.isfinite(loop.train_epoch()["loss"])


def test_on_a_cpu_the_masks_come_from_the_loops_own_generator_as_they_always_did():
    # The CPU is the device: the masks' stream is the loop's generator, after the pass's shuffle, exactly as
    # before masks moved to the device (so every committed CPU result stands).
    loop = _pretrain()
    assert loop.mask_generator is loop.generator
    x, where = loop.batch_inputs(loop.batches.next())
    reference = torch.Generator().manual_seed(loop.cfg.seed)
    order = torch.randperm(len(TRAIN), generator=reference)
    assert torch.equal(x, loop.train_x[order[:8]])
    assert torch.equal(where, torch.rand((8, INFO.seq_len), generator=reference) < 0.5)
    assert "mask_generator" not in loop.state_dict()  # the generator's own state already holds the stream


def test_a_checkpoints_learning_rates_are_plain_floats_and_reload_as_the_devices():
    from sptune.training.optimizer import place_lr, plain_lr_state

    loop = _finetune()
    loop.train_epoch()
    state = _through_a_file(loop.state_dict())
    assert all(type(g["lr"]) is float for g in state["optimizer"]["param_groups"])
    assert all(type(v) is float for v in state["schedule"]["_last_lr"])
    # A GPU's rates are tensors in the optimizer, floats in its checkpoint, floats again on a CPU.
    loop.optimizer.param_groups[0]["lr"] = torch.tensor(0.25)
    plain = plain_lr_state(loop.optimizer.state_dict())["param_groups"][0]["lr"]
    assert plain == 0.25 and type(plain) is float
    place_lr(loop.optimizer, torch.device("cpu"))
    assert loop.optimizer.param_groups[0]["lr"] == 0.25 and type(loop.optimizer.param_groups[0]["lr"]) is float
