"""A pack's barrier (sptune.tuning.packs.rounds) with real tiny loops and threads for member trials: a round
runs once every expected member asked, a member leaving frees the others, a wait too long fails naming who never
came, and members restored at different rounds catch up alone before training fused again."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from sptune.tasks.base import ArraySplit
from sptune.tasks.registry import TaskRequest, load_task
from sptune.training.loops import FinetuneLoop, OptimConfig
from sptune.training.models import ModelConfig
from sptune.training.models.encoder import EncoderConfig
from sptune.tuning.packs.rounds import PackRounds, PackTimeout

pytestmark = pytest.mark.usefixtures("one_torch_thread")

MEMBERS = [{"lr": 3e-3, "seed": 3}, {"lr": 1e-3, "seed": 4}, {"lr": 2e-3, "seed": 5}]


@pytest.fixture(scope="module")
def digits():
    data = load_task(TaskRequest("digits"))
    cut = lambda split, n: ArraySplit(np.asarray(split.x[:n]), np.asarray(split.y[:n]))  # noqa: E731
    return data.info, cut(data.train, 48), cut(data.val, 16)


def _build(digits):
    info, train, val = digits

    def build(config: dict, budget: object) -> SimpleNamespace:
        torch.manual_seed(config["seed"])
        optim = OptimConfig(lr=config["lr"], batch_size=16, epochs=2, steps=12, eval_every=3, device="cpu",
                            seed=config["seed"])
        encoder = EncoderConfig(d_model=16, n_layers=1, n_heads=2, d_ff=32, dropout=0.0, max_len=info.seq_len)
        return SimpleNamespace(loop=FinetuneLoop(ModelConfig(encoder, num_classes=info.num_classes), info, train,
                                                 val, optim))

    return build


def _ask(rounds: PackRounds, k: int, out: dict) -> threading.Thread:
    def asked() -> None:
        try:
            out[k] = rounds.next_round(k)
        except Exception as err:  # noqa: BLE001 - the test reads it
            out[k] = err

    thread = threading.Thread(target=asked, daemon=True)
    thread.start()
    return thread


def test_a_round_waits_for_every_member_and_a_leaving_member_frees_the_others(digits):
    build = _build(digits)
    rounds = PackRounds("p/s/0", 3, build, timeout_s=60)
    for k, member in enumerate(MEMBERS):
        rounds.join(k, member, None)
    out: dict = {}
    threads = [_ask(rounds, k, out) for k in (0, 1)]
    threads[0].join(timeout=1.0)
    assert out == {}, "a round ran before member 2 asked or left"
    rounds.leave(2)  # its trial ended (halving stopped it while paused): the others go on without it
    for thread in threads:
        thread.join(timeout=60)
    assert set(out) == {0, 1} and all(out[k]["epoch"] == 1 for k in (0, 1))
    assert rounds.fused_rounds == 1
    # Each member's round is its solo loop's: the same loss as the member trained alone.
    for k in (0, 1):
        solo = build(MEMBERS[k], None).loop.train_round()
        assert out[k]["loss"] == pytest.approx(solo["loss"], rel=1e-5)


def test_a_member_that_never_asks_fails_the_wait_with_its_index(digits):
    rounds = PackRounds("p/s/1", 2, _build(digits), timeout_s=0.5)
    rounds.join(0, MEMBERS[0], None)
    with pytest.raises(PackTimeout, match=r"pack p/s/1: member 0 waited 0 s .* members \[1\] never asked"):
        rounds.next_round(0)


def test_members_restored_at_different_rounds_catch_up_alone_then_train_fused(digits):
    rounds = PackRounds("p/s/2", 2, _build(digits), timeout_s=60)
    for k in (0, 1):
        rounds.join(k, MEMBERS[k], None)
    out: dict = {}
    for thread in [_ask(rounds, k, out) for k in (0, 1)]:
        thread.join(timeout=60)
    saved = rounds.state(0)  # member 0's checkpoint after round 1
    out.clear()
    for thread in [_ask(rounds, k, out) for k in (0, 1)]:
        thread.join(timeout=60)
    second = out[0]
    assert rounds.fused_rounds == 2
    rounds.load(0, saved)  # a resume: member 0 from round 1, member 1 at round 2
    out.clear()
    late = _ask(rounds, 1, out)
    _ask(rounds, 0, out).join(timeout=60)
    assert out[0]["epoch"] == 2 and 1 not in out  # member 0 caught up alone; member 1 still waits
    assert out[0]["loss"] == pytest.approx(second["loss"], rel=1e-5)  # the same round as before the resume
    assert rounds.fused_rounds == 2
    _ask(rounds, 0, out).join(timeout=60)
    late.join(timeout=60)
    assert out[0]["epoch"] == out[1]["epoch"] == 3 and rounds.fused_rounds == 3


def test_a_diverged_member_reports_it_and_the_pack_goes_on_without_it(digits):
    rounds = PackRounds("p/s/3", 2, _build(digits), timeout_s=60)
    for k in (0, 1):
        rounds.join(k, MEMBERS[k], None)
    with torch.no_grad():
        next(rounds.jobs[1].loop.model.parameters()).fill_(float("nan"))  # member 1's loss goes NaN
    out: dict = {}
    for thread in [_ask(rounds, k, out) for k in (0, 1)]:
        thread.join(timeout=60)
    assert out[1]["diverged"] == 1 and "epoch" in out[0] and not out[0].get("diverged")
    out.clear()
    _ask(rounds, 0, out).join(timeout=60)  # member 1 is no longer waited for
    assert out[0]["epoch"] == 2


def _exact(metrics: dict) -> dict:
    return {key: value for key, value in metrics.items() if key != "epoch_seconds"}  # all but the clock


def test_a_looped_pack_trains_each_member_as_its_solo_loop_bit_for_bit(digits):
    # resources.pack_fusion: looped (auto on a CPU): the barrier still holds the members in step, but each trains
    # its own solo loop's round, so its numbers and weights are the unpacked trial's exactly, not within 1e-5.
    build = _build(digits)
    rounds = PackRounds("p/s/4", 3, build, timeout_s=60, fuses=lambda device: False)
    for k, member in enumerate(MEMBERS):
        rounds.join(k, member, None)
    solos = [build(member, None).loop for member in MEMBERS]
    for _ in range(2):
        out: dict = {}
        threads = [_ask(rounds, k, out) for k in (0, 1)]
        threads[0].join(timeout=1.0)
        assert out == {}, "a looped round ran before member 2 asked"
        threads.append(_ask(rounds, 2, out))
        for thread in threads:
            thread.join(timeout=60)
        for k, solo in enumerate(solos):
            assert _exact(out[k]) == _exact(solo.train_round())
    assert rounds.fused_rounds == 0
    for k, solo in enumerate(solos):
        packed = rounds.jobs[k].loop.model.state_dict()
        assert all(torch.equal(packed[name], value) for name, value in solo.model.state_dict().items())
