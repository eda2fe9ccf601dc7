"""The hub is asked only when it answers: offline (HF_HUB_OFFLINE, or an endpoint that does not answer) and
uncached, a hub dataset is refused at once, naming HF_HUB_OFFLINE and the local formats; a --data-dir of the
user's own never reaches the hub."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sptune.tasks import hub

REPO = Path(__file__).resolve().parents[2]


def test_offline_requested_by_either_variable(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    assert not hub.offline_requested()
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    assert hub.offline_requested()
    assert hub.why_not_online() == "HF_HUB_OFFLINE is set"


def test_the_probe_tells_an_answering_endpoint_from_a_closed_one(monkeypatch):
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}")
        assert hub.hub_reachable()
    finally:
        server.shutdown()
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens on the discard port
    assert not hub.hub_reachable()


def test_uncached_offline_is_refused_without_importing_datasets(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_DATASETS_CACHE", raising=False)
    monkeypatch.setitem(sys.modules, "datasets", None)  # an import would raise
    with pytest.raises(hub.HubUnavailable, match="not in the Hugging Face cache"):
        hub.load_hub_dataset("owner/name")
    (tmp_path / "hub" / "datasets--owner--name").mkdir(parents=True)
    assert hub.in_cache("owner/name")


def _data_cli(tmp_path: Path, *argv: str) -> tuple[subprocess.CompletedProcess, float]:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    env.update(PYTHONPATH=str(REPO), HF_ENDPOINT="http://127.0.0.1:9", HF_HOME=str(tmp_path / "hf"))
    env.pop("SPTUNE_DATA_DIR", None)
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "sptune.data", *argv], env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    return done, time.monotonic() - start


@pytest.mark.parametrize("task", ["image", "text"])
def test_no_network_and_no_data_answers_at_once(tmp_path, task):
    """Without HF_HUB_OFFLINE and with no hub answering: one paragraph naming HF_HUB_OFFLINE and the local formats.
    The bound is loose for a contended machine; the answer took 0.5-0.7 s of CPU here (the hub's retries: ~25 s)."""
    done, seconds = _data_cli(tmp_path, "info", task)
    assert done.returncode == 2, done.stderr
    assert "HF_HUB_OFFLINE" in done.stderr and "parquet" in done.stderr and "Retrying" not in done.stderr
    assert ("cifar10_gray.npz" if task == "image" else "aclImdb") in done.stderr
    assert seconds < 15, seconds


def test_a_data_dir_of_ones_own_never_asks_the_hub(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "other.txt").write_text("x")
    done, _ = _data_cli(tmp_path, "info", "image", "--data-dir", str(tmp_path / "mine"))
    assert done.returncode == 2
    assert "hub is not asked" in done.stderr and "127.0.0.1:9" not in done.stderr, done.stderr
