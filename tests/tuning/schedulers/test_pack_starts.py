"""Which paused trial starts when trials are packed (sptune.tuning.schedulers.pack_starts): a member owed to a
pack that trains goes first, and a pack none of whose members run starts only when all of it fits."""

from __future__ import annotations

from types import SimpleNamespace

from ray.tune.experiment import Trial

from sptune.tuning.packs.membership import PACK_KEY
from sptune.tuning.schedulers.pack_starts import pack_aware_pick


def _trial(tid: str, status: str, pack: str | None) -> SimpleNamespace:
    config = {"lr": 0.1} if pack is None else {PACK_KEY: {"name": pack, "member": 0, "size": 2}}
    return SimpleNamespace(trial_id=tid, status=status, config=config)


def test_a_member_owed_to_a_training_pack_goes_before_a_lower_index():
    a0, a1 = _trial("a0", Trial.PAUSED, "A"), _trial("a1", Trial.PAUSED, "A")
    b0, b1 = _trial("b0", Trial.RUNNING, "B"), _trial("b1", Trial.PAUSED, "B")
    assert pack_aware_pick([a0, a1, b1], [a0, a1, b0, b1], max_concurrent=3) is b1
    assert pack_aware_pick([a0, a1, b1], [a0, a1, b0, b1], max_concurrent=1) is None  # no slot: it waits


def test_a_pack_starts_only_when_all_its_paused_members_fit():
    a0, a1 = _trial("a0", Trial.PAUSED, "A"), _trial("a1", Trial.PAUSED, "A")
    other = _trial("x", Trial.RUNNING, None)
    assert pack_aware_pick([a0, a1], [a0, a1, other], max_concurrent=2) is None  # 1 free, 2 needed
    assert pack_aware_pick([a0, a1], [a0, a1, other], max_concurrent=3) is a0
    solo = _trial("s", Trial.PAUSED, None)
    assert pack_aware_pick([solo], [solo, other], max_concurrent=2) is solo
    new = _trial("n", Trial.PENDING, "C")
    assert pack_aware_pick([new], [new, other], max_concurrent=1) is new  # Tune starts new trials anyway
