"""sptune.storage on the local filesystem and on URIs (no server needed: nothing here opens one)."""

from __future__ import annotations

import pytest

from sptune import storage

S3 = "s3://bucket/prefix?endpoint_override=127.0.0.1:9000&scheme=http"


def test_join_keeps_the_query_at_the_end():
    assert storage.join(S3, "study", "trial/checkpoint_1") == (
        "s3://bucket/prefix/study/trial/checkpoint_1?endpoint_override=127.0.0.1:9000&scheme=http"
    )
    assert storage.join("s3://bucket/prefix/", "/x/") == "s3://bucket/prefix/x"
    assert storage.join("/tmp/out", "study") == "/tmp/out/study"


def test_a_checkpoint_path_ray_reports_becomes_a_uri_under_the_storage():
    uri = storage.checkpoint_uri(S3, "bucket/prefix/study/t_1/checkpoint_000002")
    assert uri == "s3://bucket/prefix/study/t_1/checkpoint_000002?endpoint_override=127.0.0.1:9000&scheme=http"
    assert storage.checkpoint_uri("/local/storage", "/local/storage/study/x") == "/local/storage/study/x"
    with pytest.raises(ValueError):
        storage.checkpoint_uri(S3, "other-bucket/study/x")


def test_only_uris_other_than_file_are_remote():
    assert storage.is_remote(S3) and storage.is_remote("gs://b/p")
    assert not storage.is_remote("/tmp/x") and not storage.is_remote("file:///tmp/x") and not storage.is_remote(None)


@pytest.mark.parametrize("uri", ["s3://KEY:SECRET@bucket/p", "s3://bucket/p?secret_key=S&access_key=K",
                                 "s3://bucket/p?session_token=T"])
def test_credentials_in_the_uri_are_found(uri):
    assert storage.credentials_in(uri)


def test_the_endpoint_comes_from_the_uri_or_the_environment(monkeypatch):
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    assert storage.endpoint(S3) == "http://127.0.0.1:9000"
    assert storage.endpoint("s3://bucket/p") is None
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://minio:9000")
    assert storage.endpoint("s3://bucket/p") == "http://minio:9000"
    assert storage.endpoint("gs://bucket/p") is None
    assert not storage.credentials_in(S3)


def test_local_copy_and_mirror_on_a_local_path(tmp_path):
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "state.pt").write_bytes(b"x")
    with storage.local_copy(str(tmp_path / "ck")) as folder:
        assert (folder / "state.pt").read_bytes() == b"x"
    assert storage.exists(str(tmp_path / "ck" / "state.pt")) and not storage.exists(str(tmp_path / "none"))
    mirror = storage.DriverFileMirror(str(tmp_path / "storage"), tmp_path / "out")
    assert mirror.storage is None and mirror.pull() == []  # local storage: the output dir is the copy


def test_mirror_pushes_and_pulls_through_pyarrow(tmp_path):
    """A file:// URI goes through pyarrow like s3:// does; is_remote() is what turns mirroring on."""
    remote = tmp_path / "remote"
    remote.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    (out / "study_state.json").write_text("{}")
    (out / "optuna.db").write_bytes(b"db")
    mirror = storage.DriverFileMirror(str(remote), out)
    mirror.storage = remote.as_uri()  # force the remote path through the same pyarrow calls
    mirror.push("study_state.json", "optuna.db", "missing.txt")
    assert (remote / "study_state.json").read_text() == "{}"
    fresh = storage.DriverFileMirror(str(remote), tmp_path / "new")
    fresh.storage = remote.as_uri()
    assert fresh.pull() == ["study_state.json", "optuna.db"]
    assert (tmp_path / "new" / "optuna.db").read_bytes() == b"db"


def test_paths_under_a_moved_study_folder_are_read_under_its_copy(tmp_path):
    old, new = tmp_path / "old", tmp_path / "new"
    storage.set_moves({})
    storage.follow_folder_move(old, new)
    try:
        assert storage.relocated(f"{old}/ray_results/study/t1/checkpoint_000003") == (
            f"{new}/ray_results/study/t1/checkpoint_000003"
        )
        assert storage.relocated(f"sqlite:///{old}/mlflow.db") == f"sqlite:///{new}/mlflow.db"
        assert storage.relocated(f"file://{old}/mlartifacts/1") == f"file://{new}/mlartifacts/1"
        assert storage.relocated(f"{old}-other/x") == f"{old}-other/x"  # a sibling folder is not the study's
        assert storage.relocated("s3://bucket/study/t1") == "s3://bucket/study/t1"
        tree = storage.relocated_tree({"a": [f"{old}/x", 3], "b": {"c": str(old)}})
        assert tree == {"a": [f"{new}/x", 3], "b": {"c": str(new)}}
        assert storage.moves() == {str(old.resolve()): str(new.resolve())}
    finally:
        storage.set_moves({})
    assert storage.relocated(f"{old}/x") == f"{old}/x"
