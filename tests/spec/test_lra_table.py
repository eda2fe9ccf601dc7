"""sweeps/lra_table.yaml trains each study in the papers' settings (the papers' reference numbers), and
its batch sizes leave no variant a different batch at one LR. Its dry run on data is in tests/test_cost.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sptune.spec import load_spec
from sptune.spec.campaign import expand

CAMPAIGN = Path(__file__).resolve().parents[2] / "sweeps" / "lra_table.yaml"

# study: (d_model, n_layers, n_heads, d_ff options, pooling), mask ratio, SPT lr / batch, finetune lr / batch,
# weight decay, SPT / finetune epochs. ListOps pretrains 20 epochs (saturates after ~10: the campaign says why).
PAPER = {
    "image": ((64, 3, 4, (128,), "max"), 0.5, (1e-3, 32), (1e-3, 16), 0.0, (200, 100)),
    "image_rotary": ((256, 6, 8, (512,), "max"), 0.5, (1e-3, 32), (1e-3, 16), 0.0, (200, 100)),
    "listops": ((512, 6, 8, (1024,), "mean"), 0.1, (1e-3, 128), (1e-4, 64), 0.1, (20, 100)),
    "text": ((512, 6, 8, (1024,), "mean"), 0.15, (5e-4, 32), (1e-4, 64), 0.1, (200, 100)),
    "retrieval": ((128, 4, 4, (512,), "mean"), 0.15, (5e-3, 32), (5e-4, 16), 0.0, (200, 100)),
    "pathfinder": ((128, 4, 8, (128, 512), "mean"), 0.5, (1e-3, 32), (5e-4, 16), 0.0, (200, 100)),
}
MAX_LEN = {"listops": 2000, "text": 4096, "retrieval": 4000}


def _specs() -> dict:
    studies = expand(yaml.safe_load(CAMPAIGN.read_text()), CAMPAIGN)
    return {s.name: load_spec(s.spec_path, list(s.overrides)) for s in studies}


SPECS = _specs()


def test_the_campaign_has_the_papers_tasks():
    assert tuple(SPECS) == tuple(PAPER)


@pytest.mark.parametrize("name", PAPER)
def test_each_study_has_the_papers_model_masking_lrs_batches_and_epochs(name):
    spec = SPECS[name]
    model, mask, (pt_lr, pt_batch), (ft_lr, ft_batch), wd, (pt_epochs, ft_epochs) = PAPER[name]
    d, layers, heads, ffn, pooling = model
    m = spec.model
    assert (m.d_model, m.n_layers, m.n_heads, m.pooling) == (d, layers, heads, pooling) and m.d_ff in ffn
    # The reference's fixed sinusoidal table (sptune.spec.task_defaults), rotary in Coser & Orvieto's row.
    assert m.positions == ("rotary" if name == "image_rotary" else "sinusoidal")
    assert m.dropout == 0.0
    p = spec.pretrain
    assert (p.mask_ratio, p.weight_decay, spec.finetune.weight_decay) == (mask, wd, wd)
    assert p.num_samples == 1 and p.search.lr.candidates() == [pt_lr] and p.search.batch_size.candidates() == [pt_batch]
    assert (p.epochs, spec.finetune.epochs) == (pt_epochs, ft_epochs)
    if name in MAX_LEN:
        assert spec.task.options["max_len"] == MAX_LEN[name]
    assert spec.rerun_seeds == 3
    for variant in ("scratch", "spt"):
        search = spec.variants[variant].search
        lrs = search.lr.candidates()
        assert ft_lr in lrs and min(lrs) == 1e-5 and max(lrs) == 1e-2, (variant, lrs)
        assert search.batch_size.candidates() == [ft_batch], variant  # one batch: the same at every LR


@pytest.mark.parametrize("name", PAPER)
def test_every_variant_sweeps_the_same_grid_once(name):
    spec = SPECS[name]
    grids = {v: tuple(spec.variants[v].search.lr.candidates()) for v in spec.variants}
    assert len(set(grids.values())) == 1, grids
    assert all(spec.variants[v].search.lr.type == "grid" and spec.variant_samples(v) == 1 for v in spec.variants)
