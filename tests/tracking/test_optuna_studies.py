"""Each variant's Optuna search persisted as an Optuna study (sptune/tracking/optuna_studies.py), without Ray:
naming, redaction, the searchers' studies and their pickling (Ray saves searchers into the experiment, here
through a real PostgreSQL server), importances, and the preflight of --optuna-storage (a port where no database
answers). Whole studies on optuna.db and on PostgreSQL killed and resumed: tests/e2e/test_optuna_storage.py.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import optuna
import pytest

from sptune.plan.study_plan import build_plan
from sptune.spec import load_spec
from sptune.sweep import main
from sptune.tasks.base import TaskInfo
from sptune.tracking.optuna_studies import (
    OptunaTarget,
    default_url,
    open_storage,
    redact,
    variant_importances,
)
from tests.helpers_cluster import free_port
from tests.helpers_optuna import DONE, PASSWORD, SPEC_NAME, spec_path

optuna.logging.set_verbosity(optuna.logging.WARNING)


@pytest.fixture
def plan(repo_root):
    spec = load_spec(Path(spec_path(repo_root)), [])
    return build_plan(spec, TaskInfo("digits", "continuous", 64, 10, levels=17), cluster_cpus=2)


# --- naming, redaction, the searchers' studies (no Ray started) ---------------------------------


def test_redact_hides_every_form_of_password():
    assert redact("postgresql://bob:s3cret@db:5432/optuna") == "postgresql://bob:***@db:5432/optuna"
    assert "s3cret" not in redact("postgresql://bob@db/optuna?password=s3cret")
    assert "s3cret" not in redact("not a url://bob:s3cret@db")  # unparseable: still hidden
    assert redact("sqlite:////runs/x/optuna.db") == "sqlite:////runs/x/optuna.db"


def _feed(searcher, n: int, offset: int = 0) -> list[str]:
    """Propose and finish n trials of the one variant in the searcher (values rise with the index)."""
    trials = [f"t_{offset + i:05d}" for i in range(n)]
    for i, trial in enumerate(trials):
        config = searcher.suggest(trial)
        assert isinstance(config, dict)
        result = {**config, "training_iteration": 1, "val_acc": 0.5 + i / 100, "best_val_acc": 0.5 + i / 100}
        searcher.on_trial_complete(trial, result)
    return trials


def test_a_variants_search_is_a_described_optuna_study(plan, tmp_path):
    from sptune.judging.stage_graph import Stage
    from sptune.tuning.tuner import staged_search

    target = OptunaTarget(default_url(tmp_path), SPEC_NAME, "digits")
    scratch = next(s for s in plan.variant_searches() if s.variant == "scratch")
    searcher, _ = staged_search(plan, [Stage(scratch)], {}, {}, target)
    trials = _feed(searcher, plan.spec.searcher.batch_size)
    study = optuna.load_study(study_name=f"{SPEC_NAME}/scratch", storage=default_url(tmp_path))
    attrs = study.user_attrs
    assert attrs["variant"] == "scratch" and attrs["task"] == "digits" and attrs["phase"] == "search"
    assert (attrs["metric"], attrs["direction"]) == ("best_val_acc", "max")
    assert attrs["search_space"]["lr"] == {
        "type": "loguniform",
        "low": scratch.space.lr.low,
        "high": scratch.space.lr.high,
        "values": None,
        "extend": True,  # digits_quick widens a range whose pick sits at a bound (the LR extension)
    }
    assert study.direction == optuna.study.StudyDirection.MAXIMIZE
    assert [t.user_attrs["ray_trial_id"] for t in study.trials] == trials
    assert [t.value for t in study.trials] == [0.5 + i / 100 for i in range(len(trials))]
    assert all(t.user_attrs["told_at_epoch"] == 1 for t in study.trials)
    # The value told is the best-so-far score at the first rung (digits_quick: sha, grace 5), not at the best
    # epoch selection uses: the database, the dashboard's objective name and the searcher's own study say so.
    told = "best_val_acc at epoch 5 (the first rung)"
    assert attrs["value_is"] == told and study.metric_names == [told]
    assert searcher.searchers["search-scratch"].inner._ot_study.metric_names == [told]


@pytest.mark.parametrize("overrides, told", [
    (["scheduler.type=fifo"], "best_val_acc when the trial ended"),
    (["searcher.mode=async", "scheduler.type=asha"], "best_val_acc when the trial ended"),
    (["scheduler.type=asha", "scheduler.grace_period=2"], "best_val_acc at epoch 2 (the first rung)"),
])  # fmt: skip
def test_the_value_told_is_named_as_it_is(repo_root, overrides, told):
    from sptune.tuning.searchers import told_value

    spec = load_spec(Path(spec_path(repo_root)), overrides)
    plan = build_plan(spec, TaskInfo("digits", "continuous", 64, 10, levels=17), cluster_cpus=2)
    assert told_value(plan, plan.variant_searches()[0]) == told
    assert told_value(plan, plan.pretrainings()[0]) == told.replace("best_val_acc", "best_val_loss")


def test_a_pickled_searcher_continues_the_same_study_without_the_password(plan, postgres):
    """Ray pickles each searcher into the experiment (tuner.pkl, searcher state): the storage goes
    with it, without its password; unpickled in a process that knows the URL, it continues."""
    from sptune.judging.stage_graph import Stage
    from sptune.tuning.tuner import staged_search

    target = OptunaTarget(postgres, "pickled", "digits")
    spt = next(s for s in plan.variant_searches() if s.variant == "spt")
    searcher, _ = staged_search(plan, [Stage(spt)], {}, {}, target)
    batch = plan.spec.searcher.batch_size
    _feed(searcher, batch)
    saved = pickle.dumps(searcher)
    assert PASSWORD.encode() not in saved
    restored = pickle.loads(saved)
    _feed(restored, spt.n_trials - batch, offset=batch)  # the rest: a last, smaller batch
    names = [n for n in optuna.get_all_study_names(open_storage(postgres)) if n.startswith("pickled/")]
    assert names == ["pickled/spt"]  # one study, continued: no duplicate
    study = optuna.load_study(study_name="pickled/spt", storage=open_storage(postgres))
    assert len(study.trials) == spt.n_trials and all(t.state in DONE for t in study.trials)


def _importance_run(tmp_path: Path, plan, trials: dict[str, int]) -> Path:
    """A run directory whose variants' studies hold the given numbers of COMPLETE trials."""
    target = OptunaTarget(default_url(tmp_path), "imp", "digits")
    target.record(tmp_path, plan.searches, default=True)
    by_variant = {s.variant: s for s in plan.variant_searches()}
    for variant, n in trials.items():
        study = target.create(by_variant[variant])
        for i in range(n):
            trial = study.ask()
            lr = trial.suggest_float("lr", 1e-4, 1e-1, log=True)
            trial.suggest_categorical("batch_size", [16, 32])
            study.tell(trial, lr * 10 + i * 1e-6)  # the value follows lr
    return tmp_path


def test_variant_importances_from_optunas_default_evaluator(plan, tmp_path):
    run = _importance_run(tmp_path, plan, {"scratch": 12, "spt": 3})
    found = variant_importances(run)
    assert set(found) == {"scratch"}  # spt: too few COMPLETE trials to say anything
    assert set(found["scratch"]) == {"lr", "batch_size"}
    assert sum(found["scratch"].values()) == pytest.approx(1.0)
    assert found["scratch"]["lr"] > found["scratch"]["batch_size"]
    assert variant_importances(tmp_path / "nothing-here") == {}


def test_importances_from_a_database_whose_password_is_unknown_are_left_out(tmp_path, monkeypatch):
    monkeypatch.delenv("SPTUNE_OPTUNA_STORAGE", raising=False)
    record = {"storage": "postgresql://bob:***@db.invalid:5432/optuna", "studies": {"scratch": "x/scratch"}}
    (tmp_path / "optuna.json").write_text(json.dumps(record))
    with pytest.warns(UserWarning, match="password") as caught:
        assert variant_importances(tmp_path) == {}
    assert "bob:***@" in str(caught[0].message)


# --- preflight of --optuna-storage (nothing starts on a refusal) ---------------------------------


def _refused(repo_root, tmp_path, capsys, url: str) -> tuple[int, str]:
    out = tmp_path / "never"
    code = main([spec_path(repo_root), "--output", str(out), "--optuna-storage", url])
    err = capsys.readouterr().err
    assert not out.exists()  # nothing written
    return code, err


def test_an_unreachable_database_is_refused_before_anything_starts(repo_root, tmp_path, capsys):
    import ray

    ray_was_up = ray.is_initialized()
    url = f"postgresql://bob:{PASSWORD}@127.0.0.1:{free_port()}/optuna"
    code, err = _refused(repo_root, tmp_path, capsys, url)
    assert code == 1
    assert err.count("\n") == 1 and err.startswith("sptune: error: --optuna-storage postgresql://bob:***@127.0.0.1")
    assert "does not answer" in err and "Fix:" in err and PASSWORD not in err
    assert ray.is_initialized() == ray_was_up  # no Ray started for a refused study


def test_a_malformed_url_is_refused(repo_root, tmp_path, capsys):
    code, err = _refused(repo_root, tmp_path, capsys, f"postgres ql://bob:{PASSWORD}@db")
    assert code == 2 and "not a database URL" in err and PASSWORD not in err
    code, err = _refused(repo_root, tmp_path, capsys, "sqlite://")
    assert code == 2 and "in-memory" in err
