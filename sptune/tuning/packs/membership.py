"""Which pack a trial belongs to: its stage, the pack's index in the stage, its member index and the pack's size.

A stage's trials are packed in the order its searcher suggests them, K at a time, never across a suggestion
batch (a batched searcher proposes nothing more until its batch settles at the first rung, so a pack spanning two
batches would wait on members that cannot start). The pack's size is known when its first member starts: the
barrier waits for exactly that many members. Members need not share a batch size: the executor fuses each
packable group (same batch size) and trains a lone member alone (`rounds.PackRounds`).

The slot travels in the trial's config under `PACK_KEY`, which records that read configs as hyperparameters
(the ledger's outcomes, MLflow's params) leave out: a packed study's records are the unpacked one's.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import Any

PACK_KEY = "pack"
# Executors are named in a namespace of their own: a resumed driver (a new Ray job) finds and ends the old ones.
PACK_NAMESPACE = "sptune-packs"


@dataclass(frozen=True)
class PackSlot:
    name: str  # the executor's actor name: study prefix / stage / pack index
    member: int  # this trial's index in the pack
    size: int  # members the pack expects

    def as_config(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def of(cls, config: dict[str, Any]) -> PackSlot | None:
        found = config.get(PACK_KEY)
        return None if found is None else cls(str(found["name"]), int(found["member"]), int(found["size"]))


def pack_prefix(experiment_dir: str) -> str:
    """The study's executors' name prefix: from its Tuner's directory, the same for a resumed driver."""
    return "sptune-pack-" + hashlib.sha1(experiment_dir.encode()).hexdigest()[:12]


def slot_for(index: int, n_trials: int, batch: int, pack: int) -> tuple[int, int, int]:
    """(pack index, member index, pack size) of a stage's ``index``-th trial (from 0), of ``n_trials``, suggested
    in batches of ``batch``, packed ``pack`` at a time within each batch."""
    batch = max(1, min(batch, n_trials))
    b, j = divmod(index, batch)
    batch_len = min(batch, n_trials - b * batch)
    packs_per_batch = -(-batch // pack)
    first = (j // pack) * pack
    return b * packs_per_batch + j // pack, j - first, min(pack, batch_len - first)


def without_pack(config: dict[str, Any]) -> dict[str, Any]:
    """The trial's config as records read it: its hyperparameters and stage, not its pack."""
    return {k: v for k, v in config.items() if k != PACK_KEY}
