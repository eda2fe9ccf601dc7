"""A phase travels as text (trial configs, the MLflow tag sptune.phase, Optuna user attrs, results.json):
`Phase` members must read, format and serialise as exactly the strings studies have always written."""

import json
from pathlib import Path

from sptune.judging.stage_graph import Stage, StageKind
from sptune.plan.phases import TRAINED_TO_THE_END, Phase
from sptune.plan.study_plan import build_plan
from sptune.spec import load_spec
from sptune.tasks.base import TaskInfo


def test_phases_keep_their_strings():
    assert [p.value for p in Phase] == ["pretrain", "search", "extend", "candidate", "rerun"]
    assert json.dumps({"phase": Phase.CANDIDATE}) == '{"phase": "candidate"}'
    assert f"{Phase.RERUN}-spt" == "rerun-spt" and str(Phase.SEARCH) == "search"
    assert Phase("extend") is Phase.EXTEND and "search" == Phase.SEARCH


def test_only_trials_that_compete_on_equal_epochs_train_to_the_end():
    assert set(TRAINED_TO_THE_END) == {Phase.RERUN, Phase.EXTEND, Phase.CANDIDATE}


def test_a_stage_kind_names_the_stage_and_the_phase_its_trials(repo_root):
    """Stage kinds name stages (and start their labels); phases name what their trials are."""
    spec = load_spec(Path(repo_root) / "search_spaces" / "digits_quick.yaml", ["variants.spt.num_samples=4"])
    plan = build_plan(spec, TaskInfo("digits", "continuous", 64, 10, levels=17), cluster_cpus=2)
    assert [s.phase for s in plan.searches] == [Phase.PRETRAIN, Phase.SEARCH, Phase.SEARCH]
    search = plan.variant_searches()[-1]
    stages = {kind: Stage(search, kind, (5000,), after=search.label, extend_round=int(kind is StageKind.EXTEND))
              for kind in (StageKind.EXTEND, StageKind.CANDIDATES, StageKind.RERUN)}
    assert {k: s.trial_plan.phase for k, s in stages.items()} == {
        StageKind.EXTEND: Phase.EXTEND, StageKind.CANDIDATES: Phase.CANDIDATE, StageKind.RERUN: Phase.RERUN}
    assert [s.label.split("-")[0] for s in stages.values()] == ["extend", "candidates", "rerun"]
