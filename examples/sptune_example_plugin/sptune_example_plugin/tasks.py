"""`majority`: which of two symbols occurs more often in a random token sequence (generated, no download).

Tokens 0 and 1 are sptune's padding and mask ids; symbols are 2..vocab_size-1. The label is 1 when symbol 2
occurs more often than symbol 3 (ties are redrawn), so the answer depends on the whole sequence: a model must
count, which a per-token SPT objective can prepare it for.
"""

from __future__ import annotations

import numpy as np

from sptune.plugins import ArraySplit, Option, TaskDef, TaskInfo, TaskRequest, TaskSplits

PAD, MASK = 0, 1
DEFAULTS = {"n_train": 600, "n_val": 150, "n_test": 200, "seq_len": 32, "symbols": 6, "gen_seed": 0}
RULES = {key: Option(int, low=1) for key in ("n_train", "n_val", "n_test", "seq_len")} | {"symbols": Option(int, low=2)}


def generate(n: int, seq_len: int, symbols: int, rng: np.random.Generator) -> ArraySplit:
    """``n`` sequences without a tie between symbols 2 and 3, and their labels."""
    rows: list[np.ndarray] = []
    while len(rows) < n:
        x = rng.integers(2, 2 + symbols, size=seq_len)
        a, b = int((x == 2).sum()), int((x == 3).sum())
        if a != b:
            rows.append(x)
    x = np.stack(rows).astype(np.int64)
    y = ((x == 2).sum(axis=1) > (x == 3).sum(axis=1)).astype(np.int64)
    return ArraySplit(x, y)


def load(request: TaskRequest) -> TaskSplits:
    o = request.options
    # One generator per split, seeded from gen_seed: the test split is drawn only when sptune reads it.
    seeds = np.random.SeedSequence(o["gen_seed"]).spawn(3)
    shape = (o["seq_len"], o["symbols"])
    info = TaskInfo(
        "majority", "tokens", o["seq_len"], num_classes=2, vocab_size=2 + o["symbols"], pad_id=PAD, mask_id=MASK
    )
    train = generate(o["n_train"], *shape, np.random.default_rng(seeds[0]))
    val = generate(o["n_val"], *shape, np.random.default_rng(seeds[1]))
    return TaskSplits(
        info,
        train,
        val,
        lambda: generate(o["n_test"], *shape, np.random.default_rng(seeds[2])),
        source=f"majority (generated, gen_seed {o['gen_seed']})",
    )


def available(request: TaskRequest) -> None:
    """Generated: always available."""


MAJORITY = TaskDef(
    name="majority",
    description="generated: is symbol 2 more frequent than symbol 3 (2 classes)",
    defaults=DEFAULTS,
    load=load,
    check_available=available,
    rules=RULES,
)
