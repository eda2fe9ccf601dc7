"""The Hugging Face hub, asked only when it can answer.

``datasets.load_dataset("owner/name")`` without a network retries for ~25 s before it fails, even when the copy
is not in the local cache either. Here the answer comes first: with ``HF_HUB_OFFLINE`` set, or when a short HTTP
probe of the hub's endpoint fails, a dataset missing from the user's Hugging Face cache is refused at once, without
importing ``datasets``; one that is cached is loaded from the cache in offline mode. Only a reachable hub is asked.
"""

from __future__ import annotations

import http.client
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

DEFAULT_ENDPOINT = "https://huggingface.co"
# Long enough for a TCP handshake to a reachable host; the probe runs in a thread so a hanging DNS lookup is
# bounded by it too.
PROBE_SECONDS = 1.0
_TRUE = {"1", "ON", "YES", "TRUE"}


class HubUnavailable(Exception):
    """The dataset cannot come from the hub now; ``str()`` says why in one sentence."""


def offline_requested() -> bool:
    """``HF_HUB_OFFLINE`` (or the older ``HF_DATASETS_OFFLINE``) is set to a true value."""
    return any(os.environ.get(name, "").upper() in _TRUE for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))


def endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/")


def hub_reachable(timeout: float = PROBE_SECONDS) -> bool:
    """Whether the hub's endpoint answers an HTTP HEAD within ``timeout`` seconds (DNS and TLS included: a proxy
    that accepts every connection but is not the hub fails the certificate check)."""
    url = urlparse(endpoint())
    connection = http.client.HTTPConnection if url.scheme == "http" else http.client.HTTPSConnection
    answer: list[bool] = []

    def probe() -> None:
        try:
            conn = connection(url.hostname or "", url.port, timeout=timeout)
            conn.request("HEAD", url.path or "/")
            conn.getresponse()
            conn.close()
            answer.append(True)
        except (OSError, http.client.HTTPException):
            answer.append(False)

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout)
    return bool(answer and answer[0])


def hf_home() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME", "~/.cache")) / "huggingface"
    return Path(os.environ.get("HF_HOME", default)).expanduser()


def cache_folders(repo_id: str) -> list[Path]:
    """Where the user's Hugging Face caches would hold ``repo_id``: the hub's download cache and the prepared
    arrow files of ``datasets`` (the names those libraries give them)."""
    hub = Path(os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE") or hf_home() / "hub")
    prepared = Path(os.environ.get("HF_DATASETS_CACHE") or hf_home() / "datasets")
    return [
        hub.expanduser() / f"datasets--{repo_id.replace('/', '--')}",
        prepared.expanduser() / repo_id.replace("/", "___"),
    ]


def in_cache(repo_id: str) -> bool:
    return any(folder.is_dir() for folder in cache_folders(repo_id))


def why_not_online() -> str | None:
    """None when the hub can be asked; else why not (offline mode requested, or the endpoint did not answer)."""
    if offline_requested():
        return "HF_HUB_OFFLINE is set"
    if not hub_reachable():
        return (
            f"{endpoint()} did not answer within {PROBE_SECONDS:g} s (no network; set HF_HUB_OFFLINE=1 to skip "
            "this probe)"
        )
    return None


@contextmanager
def forced_offline() -> Iterator[None]:
    """``datasets`` and ``huggingface_hub`` in offline mode for this block: cached copies only, no retries."""
    import datasets.config
    import huggingface_hub.constants

    saved = datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = huggingface_hub.constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE = saved


def load_hub_dataset(repo_id: str, **kwargs: Any) -> Any:
    """``datasets.load_dataset(repo_id, **kwargs)`` from the hub when it answers, else from the user's cache in
    offline mode; `HubUnavailable` at once when it is neither reachable nor cached."""
    offline = why_not_online()
    if offline is not None and not in_cache(repo_id):
        raise HubUnavailable(f"{offline}, and '{repo_id}' is not in the Hugging Face cache ({hf_home()})")
    import datasets  # here: a slow import, needed only when the hub or its cache is read

    with forced_offline() if offline is not None else nullcontext():
        return datasets.load_dataset(repo_id, **kwargs)


def hub_problem(err: Exception) -> str:
    """An exception from the hub as one short clause."""
    if isinstance(err, HubUnavailable):
        return str(err)
    first = str(err).splitlines()[0][:160] if str(err) else ""
    return f"{type(err).__name__}: {first}"


OFFLINE_FIX = (
    "or, for the hub copy, load it once online (it stays in the Hugging Face cache) and set "
    "HF_HUB_OFFLINE=1 to read the cache without waiting on the network"
)
