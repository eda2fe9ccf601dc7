"""A campaign run end to end: several studies (an ablation axis) run as one, SPT pretrained once, rows merged."""

from __future__ import annotations

import json

import pytest

from sptune.sweep import main
from tests.spec.test_campaign import CAMPAIGN, SPEC


@pytest.mark.heavy  # campaigns also run in test_own_data and test_plugins
def test_campaign_expands_axes_shares_spt_and_merges_rows(ray_session, tmp_path, capsys):
    (tmp_path / "camp.yaml").write_text(SPEC)
    (tmp_path / "campaign.yaml").write_text(CAMPAIGN)
    out = tmp_path / "out"
    assert main([str(tmp_path / "campaign.yaml"), "--output", str(out)]) == 0
    merged = json.loads((out / "results.json").read_text())
    assert merged["campaign"] == "tiny"
    assert sorted(r["study"] for r in merged["rows"]) == ["frac-train_fraction0.5", "frac-train_fraction1.0"]
    # The data fraction does not change what SPT sees? It does: the fraction subsets the
    # training split, so each study pretrains on its own data -- two cache entries.
    assert len(list((out / "spt_cache").iterdir())) == 2
    report = (out / "report.html").read_text()
    # Studies sit side by side in the campaign report, never pooled into one column.
    assert "digits · frac-train_fraction0.5" in report and "digits · frac-train_fraction1.0" in report
    assert (out / "frac-train_fraction0.5" / "report.html").exists()
    # Identical pretraining is reused: a second campaign over a finetuning-only axis.
    (tmp_path / "campaign2.yaml").write_text(CAMPAIGN.replace("task.train_fraction: [0.5, 1.0]",
                                                              "finetune.weight_decay: [0.0, 0.1]"))
    out2 = tmp_path / "out2"
    assert main([str(tmp_path / "campaign2.yaml"), "--output", str(out2)]) == 0
    assert len(list((out2 / "spt_cache").iterdir())) == 1
    assert "same pretraining as an earlier study" in capsys.readouterr().out
    # The second study's one Tuner ran no pretraining trial: its SPT variant started from the cache.
    trials = [json.loads(p.read_text()) for p in (out2 / "frac-weight_decay0.1").glob("ray_results/*/*/params.json")]
    assert trials and not [t for t in trials if t["phase"] == "pretrain"]
