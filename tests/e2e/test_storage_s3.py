"""--storage s3://…: a study killed and resumed from the storage alone, against an S3-compatible server.

moto's standalone server runs on 127.0.0.1 (its own process group, stopped by PID); sptune talks to it
with the real clients over HTTP (pyarrow for Tune and sptune, boto3 inside MLflow), nothing patched in
process. Credentials come only from the environment; the secret must never appear in the drivers'
output, the output directories, the objects under the prefix, or MLflow's params and tags.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest
from mlflow.tracking import MlflowClient

from tests.helpers_cluster import LOOPBACK, NOT_READY, START_TIMEOUT_S, free_port, wait_for
from tests.helpers_tiny import TINY, selected_rows, trial_configs

boto3 = pytest.importorskip("boto3")
pytest.importorskip("flask_cors")  # moto's server extra

BUCKET = "sptune-bucket"
STUDY_TIMEOUT_S = 240


def _spec(repo_root: str) -> str:
    return str(Path(repo_root) / "search_spaces" / "digits_quick.yaml")


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    """One moto server for the module, a bucket, and the environment a driver needs to reach it."""
    root = tmp_path_factory.mktemp("moto")
    port = free_port()
    endpoint = f"http://{LOOPBACK}:{port}"
    secret = "sptune-secret-" + secrets.token_hex(12)
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": "sptune-test-key",
        "AWS_SECRET_ACCESS_KEY": secret,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",  # no instance-metadata lookups from the AWS clients
    }
    with open(root / "moto.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", LOOPBACK, "-p", str(port)],
                                env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="sptune-test-key",
                              aws_secret_access_key=secret, region_name="us-east-1")
        _wait_for_moto(endpoint, secret, proc, root / "moto.log")
        client.create_bucket(Bucket=BUCKET)
        yield {"client": client, "endpoint": endpoint, "secret": secret, "env": env, "root": root,
               "query": f"endpoint_override={LOOPBACK}:{port}&scheme=http"}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)


def _wait_for_moto(endpoint: str, secret: str, proc: subprocess.Popen, log: Path) -> None:
    """Until the server answers: botocore raises its own errors while nothing listens (EndpointConnectionError, not
    an OSError), and a probe without botocore's retries asks again every quarter second instead of backing off."""
    from botocore.config import Config
    from botocore.exceptions import ConnectionError as BotoConnectionError
    from botocore.exceptions import HTTPClientError

    probe = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="sptune-test-key",
                         aws_secret_access_key=secret, region_name="us-east-1",
                         config=Config(retries={"total_max_attempts": 1}, connect_timeout=2, read_timeout=10))
    wait_for(lambda: probe.list_buckets() is not None, START_TIMEOUT_S, "moto server",
             retry=(*NOT_READY, BotoConnectionError, HTTPClientError), server=proc, log=log)


def _keys(s3, prefix: str) -> list[str]:
    pages = s3["client"].get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix + "/")
    return [o["Key"] for page in pages for o in page.get("Contents", [])]


def _sweep(repo_root: str, s3, out: Path, storage: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "sptune.sweep", _spec(repo_root), "--output", str(out), "--storage", storage,
            *extra, *TINY]


def _run(cmd: list[str], s3, log: Path) -> int:
    env = {**s3["env"], "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    with open(log, "wb") as f:
        return subprocess.run(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, timeout=STUDY_TIMEOUT_S).returncode


def _trial_configs(s3, prefix: str) -> list[tuple]:  # as tests.helpers_tiny.trial_configs, on S3
    """(stage, lr, batch_size) of every trial Tune recorded under the prefix (one params.json each)."""
    found = []
    for key in _keys(s3, f"{prefix}/study"):
        if key.endswith("/params.json"):
            p = json.loads(s3["client"].get_object(Bucket=BUCKET, Key=key)["Body"].read())
            found.append((p["stage"], round(p["lr"], 12), p["batch_size"]))
    return sorted(found)


def _children(results: dict) -> list:
    client = MlflowClient(results["mlflow"]["tracking_uri"])
    return client.search_runs([results["mlflow"]["experiment_id"]],
                              f"tags.mlflow.parentRunId = '{results['mlflow']['parent_run_id']}'", max_results=1000)


def _assert_no_secret(s3, results: dict, prefix: str, places: list[Path]) -> None:
    secret = s3["secret"].encode()
    for place in places:
        files = [place] if place.is_file() else [p for p in place.rglob("*") if p.is_file()]
        for path in files:
            assert secret not in path.read_bytes(), path
    for key in _keys(s3, prefix):
        assert secret not in s3["client"].get_object(Bucket=BUCKET, Key=key)["Body"].read(), key
    client = MlflowClient(results["mlflow"]["tracking_uri"])
    parent = client.get_run(results["mlflow"]["parent_run_id"])
    for run in [parent, *_children(results)]:
        for value in [*run.data.params.values(), *run.data.tags.values()]:
            assert s3["secret"] not in value


def _finetune_checkpointed(s3, out: Path, prefix: str) -> bool:
    """Pretraining selected, and Tune's snapshot under the prefix knows an SPT finetune trial that has
    a checkpoint there (the kill then lands where test_resume.py's does, after Tune's upload)."""
    state = out / "study_state.json"
    if not state.exists() or "pretrain" not in json.loads(state.read_text() or "{}").get("searches", {}):
        return False
    keys = _keys(s3, f"{prefix}/study")
    trials = {k.rsplit("/checkpoint_", 1)[0] for k in keys if "/checkpoint_" in k and k.endswith("state.pt")}
    snapshots = [k for k in keys if k.rsplit("/", 1)[-1].startswith("experiment_state")]
    if not snapshots:
        return False
    snapshot = s3["client"].get_object(Bucket=BUCKET, Key=max(snapshots))["Body"].read()
    for trial in trials:
        try:  # the trial's checkpoint is uploaded by its worker, its params.json by the driver: maybe later
            params = s3["client"].get_object(Bucket=BUCKET, Key=f"{trial}/params.json")["Body"].read()
        except s3["client"].exceptions.NoSuchKey:
            continue
        trial_id = trial.rsplit("/", 1)[-1].split("_")[1].encode()  # StudyTrainable_<id>_<n>_...
        if b'"search-spt"' in params and trial_id in snapshot:
            return True
    return False


@pytest.fixture(scope="module")
def resumed(s3, repo_root, tmp_path_factory):
    """The TINY study under s3://BUCKET/resumed, its driver killed with SIGKILL in the variants' search,
    its output directory deleted, and resumed by a new driver in another directory from the storage
    alone. (The uninterrupted run it is compared with is tests/conftest.py's `tiny_reference`: the same
    trials and numbers, whatever the storage.)"""
    tmp = tmp_path_factory.mktemp("resumed")
    storage = f"s3://{BUCKET}/resumed?{s3['query']}"
    tracking = f"sqlite:///{tmp / 'tracking' / 'mlflow.db'}"  # must outlive the output directory
    (tmp / "tracking").mkdir()
    first, second = tmp / "first", tmp / "second"
    cmd = _sweep(repo_root, s3, first, storage, "--tracking-uri", tracking)
    # The kill is timed from params.json under the prefix, which Tune's driver uploads with each snapshot
    # (by default >= 10 s apart, longer than the tiny SPT search lasts): every second here.
    env = {**s3["env"], "PYTHONPATH": repo_root, "TUNE_GLOBAL_CHECKPOINT_S": "1"}
    t0 = time.time()
    with open(tmp / "first.log", "wb") as log:
        proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=log, stderr=subprocess.STDOUT)
    # Asked 4 times a second: each ask lists the prefix and reads the snapshot from moto, which shares the 2 cores
    # with the study; the SPT search it waits inside lasts seconds.
    try:
        # A driver that ends first (it failed) ends the wait at once, with its log.
        wait_for(lambda: _finetune_checkpointed(s3, first, "resumed"), STUDY_TIMEOUT_S,
                 "an SPT finetune checkpoint under the prefix", interval=0.25, server=proc, log=tmp / "first.log")
    finally:
        with contextlib.suppress(ProcessLookupError):  # a driver that ended by itself has no group left
            os.killpg(proc.pid, signal.SIGKILL)  # the driver and the Ray it started
        proc.wait()
    interrupted_searches = set(json.loads((first / "study_state.json").read_text())["searches"])
    shutil.rmtree(first)  # the old machine's output directory is gone
    rc = _run(_sweep(repo_root, s3, second, storage, "--resume"), s3, tmp / "second.log")
    return {"rc": rc, "out": second, "tmp": tmp, "tracking": tracking, "seconds": time.time() - t0,
            "interrupted_searches": interrupted_searches}


def test_resume_from_the_storage_alone(s3, resumed, tiny_reference):
    """Nothing redone, nothing lost: the same trials and conclusions as the uninterrupted study."""
    out, tmp = resumed["out"], resumed["tmp"]
    log = (tmp / "second.log").read_text()
    assert resumed["rc"] == 0, log[-4000:]
    assert "search-spt" not in resumed["interrupted_searches"]  # killed before the SPT search was selected
    assert "fetched study_state.json" in log and "resuming the interrupted Tuner" in log
    # The same trials as the uninterrupted study, each once; one parent run, no duplicate child.
    assert _trial_configs(s3, "resumed") == trial_configs(tiny_reference)
    results = json.loads((out / "results.json").read_text())
    client = MlflowClient(resumed["tracking"])
    parents = client.search_runs([results["mlflow"]["experiment_id"]], "tags.`sptune.role` = 'study'")
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    children = _children(results)
    assert len(children) == len({c.data.tags["sptune.trial_id"] for c in children}) == 8
    reference = json.loads((tiny_reference / "results.json").read_text())
    assert selected_rows(results) == selected_rows(reference)
    assert len((out / "test_reads.jsonl").read_text().splitlines()) == 2  # the test split read once
    _assert_no_secret(s3, results, "resumed", [out, tmp / "first.log", tmp / "second.log"])
    print(f"killed and resumed S3 study: {resumed['seconds']:.0f}s")


def test_a_study_keeps_everything_under_the_prefix(s3, resumed):
    out, keys = resumed["out"], _keys(s3, "resumed")
    assert resumed["rc"] == 0
    names = {k.removeprefix("resumed/") for k in keys}
    assert {"study_state.json", "spec.yaml", "optuna.json", "optuna.db", "test_reads.jsonl", "results.json",
            "report.html", "study/sptune_snapshot.zip"} <= names
    assert "study/tuner.pkl" in names and any(n.startswith("study/experiment_state") for n in names)
    # Tune's last snapshot, whole, with the Optuna database as it was then (sptune.study.snapshot).
    bundle = s3["client"].get_object(Bucket=BUCKET, Key="resumed/study/sptune_snapshot.zip")["Body"].read()
    with zipfile.ZipFile(io.BytesIO(bundle)) as archive:
        bundled = set(archive.namelist())
    assert "optuna.db" in bundled and {n.split("-", 1)[0] for n in bundled} >= {
        "experiment_state", "searcher", "search_gen_state"}
    checkpoints = [n for n in names if n.startswith("study/") and "/checkpoint_" in n and n.endswith("/state.pt")]
    assert len({n.rsplit("/checkpoint_", 1)[0] for n in checkpoints}) == 8  # every trial of the study
    # The selected checkpoints are recorded (and were tested) as URIs under the prefix.
    results = json.loads((out / "results.json").read_text())
    assert all(r["checkpoint"].startswith(f"s3://{BUCKET}/resumed/study/") for r in results["rows"])
    assert results["pretrain"]["checkpoint_path"].startswith(f"s3://{BUCKET}/resumed/study/")
    # MLflow's artifacts: the selected checkpoints and the report, under the prefix, none in OUTPUT.
    artifacts = [n for n in names if n.startswith("mlflow-artifacts/")]
    assert sum(n.endswith("selected_checkpoint/state.pt") for n in artifacts) == 3  # pretrain + 2 variants
    assert any(n.endswith("report.html") for n in artifacts)
    assert not (out / "mlartifacts").exists()


def test_bad_storage_is_refused_before_anything_starts(s3, repo_root, tmp_path):
    missing = _run(_sweep(repo_root, s3, tmp_path / "a", f"s3://no-such-bucket/x?{s3['query']}"), s3,
                   tmp_path / "a.log")
    dead = _run(_sweep(repo_root, s3, tmp_path / "b", f"s3://{BUCKET}/x?endpoint_override={LOOPBACK}:{free_port()}"
                       "&scheme=http"), s3, tmp_path / "b.log")
    leaked = _run(_sweep(repo_root, s3, tmp_path / "c", f"s3://key:{s3['secret']}@{BUCKET}/x?{s3['query']}"), s3,
                  tmp_path / "c.log")
    assert (missing, dead, leaked) == (2, 2, 2)
    assert "bucket 'no-such-bucket' does not exist" in (tmp_path / "a.log").read_text()
    assert "does not answer" in (tmp_path / "b.log").read_text()
    assert "carries credentials" in (tmp_path / "c.log").read_text()
    assert s3["secret"] not in (tmp_path / "c.log").read_text()
    assert not any((tmp_path / d).exists() for d in "abc")  # nothing started, nothing written


def test_spt_checkpoints_the_driver_writes_reach_trials_through_the_storage(s3, repo_root, tmp_path, monkeypatch):
    """An untrained encoder (0 SPT epochs), a given `pretrain.checkpoint` and a campaign's cached one
    are files on the driver's machine: under a remote storage trials must be handed copies under the
    prefix, which a trial on any node can read, never the driver's local paths."""
    from sptune.study import spt_reuse
    from sptune.study.pretraining import PretrainedWithoutTrials
    from sptune.study.state import StateFile
    from sptune.training.checkpoint_files import load_state
    from tests.study.test_pretraining import DIGITS, _plan

    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION", "AWS_EC2_METADATA_DISABLED"):
        monkeypatch.setenv(key, s3["env"][key])
    prefix = "spt-handover"
    remote = f"s3://{BUCKET}/{prefix}?{s3['query']}"

    def checkpoints(plan, out, cache_dir=None):
        out.mkdir()
        return PretrainedWithoutTrials(plan, SimpleNamespace(info=DIGITS), out, StateFile(out), cache_dir, remote)

    untrained_plan = _plan(repo_root, "pretrain.epochs=0")
    per_seed = checkpoints(untrained_plan, tmp_path / "zero").given_per_seed(untrained_plan.pretrainings()[0])
    given_dir = tmp_path / "zero" / "pretrain-0-epochs-seed1000"  # a real sptune checkpoint to hand over
    given_plan = _plan(repo_root, "rerun_pretrain=false", f"pretrain.checkpoint={given_dir / 'state.pt'}")
    given = checkpoints(given_plan, tmp_path / "given").given(given_plan.pretrainings()[0])
    cached_plan = _plan(repo_root, "rerun_pretrain=false")  # a campaign's cache holds one checkpoint per setup
    cache_dir = tmp_path / "cache"
    cache_dir.mkdir()
    pretraining = cached_plan.pretrainings()[0]
    spt_reuse.store(cache_dir, spt_reuse.cache_key(cached_plan.spec, pretraining), given_dir)
    cached = checkpoints(cached_plan, tmp_path / "cached", cache_dir).given(pretraining)

    handed = {**{f"seed {s}": uri for s, uri in per_seed.items()}, "given": given, "cached": cached}
    for what, uri in handed.items():
        assert uri.startswith(f"s3://{BUCKET}/{prefix}/spt/"), f"{what}: trials would get {uri}"
    local = tmp_path / "zero" / "pretrain-0-epochs-seed1001" / "state.pt"
    assert load_state(per_seed[1001])["model"].keys() == load_state(local)["model"].keys()
    for name, tensor in load_state(per_seed[1001])["model"].items():
        assert tensor.equal(load_state(local)["model"][name]), name
    assert len(set(per_seed.values())) == 2 and given != cached
    assert sorted(k.split("/")[2] for k in _keys(s3, prefix)) == sorted(u.split("/")[5].split("?")[0]
                                                                       for u in handed.values())


@pytest.mark.heavy  # the storage's SPT hand-over runs above, campaigns in test_own_data and test_plugins
def test_a_campaign_keeps_each_study_under_its_own_prefix_and_hands_the_cached_spt_through_it(s3, tmp_path):
    """Two studies over a finetuning-only axis: the first pretrains (its trials and selection under
    PREFIX/<study>/), the second reuses that pretraining from the campaign's cache, and its SPT trials
    are handed the copy under its own prefix (PREFIX/<study>/spt/), not the driver's cache folder."""
    from tests.spec.test_campaign import CAMPAIGN, SPEC

    (tmp_path / "camp.yaml").write_text(SPEC)
    (tmp_path / "campaign.yaml").write_text(CAMPAIGN.replace("task.train_fraction: [0.5, 1.0]",
                                                             "finetune.weight_decay: [0.0, 0.1]"))
    prefix, out = "campaign", tmp_path / "out"
    cmd = [sys.executable, "-m", "sptune.sweep", str(tmp_path / "campaign.yaml"), "--output", str(out),
           "--storage", f"s3://{BUCKET}/{prefix}?{s3['query']}"]
    log = tmp_path / "campaign.log"
    assert _run(cmd, s3, log) == 0, log.read_text()[-3000:]
    first, second = "frac-weight_decay0.0", "frac-weight_decay0.1"
    merged = json.loads((out / "results.json").read_text())
    assert sorted(r["study"] for r in merged["rows"]) == [first, second]
    assert "same pretraining as an earlier study" in log.read_text()
    stages = {study: {json.loads(s3["client"].get_object(Bucket=BUCKET, Key=k)["Body"].read())["stage"]
                      for k in _keys(s3, f"{prefix}/{study}/study") if k.endswith("/params.json")}
              for study in (first, second)}
    assert "pretrain" in stages[first] and "pretrain" not in stages[second], stages
    handed = [k for k in _keys(s3, f"{prefix}/{second}/spt") if k.endswith("/state.pt")]
    assert len(handed) == 1 and "-cached-" in handed[0], handed
    results = json.loads((out / second / "results.json").read_text())
    spt_runs = [r for r in _children(results) if r.data.params.get("variant") == "spt"]
    spt_params = {r.data.params.get("spt_checkpoint") for r in spt_runs}
    assert spt_params == {f"s3://{BUCKET}/{handed[0].removesuffix('/state.pt')}?{s3['query']}"}, spt_params
    assert spt_runs and all(r.info.status == "FINISHED" for r in spt_runs)
    _assert_no_secret(s3, results, prefix, [out, log])
