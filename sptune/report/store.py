"""Where a study's MLflow tracking store is, and whether it can be reached."""

from __future__ import annotations

from pathlib import Path


def sqlite_path(uri: str) -> Path | None:
    """The file behind a ``sqlite:///`` URI; None for any other kind of store."""
    return Path(uri[len("sqlite:///"):]) if uri.startswith("sqlite:///") else None


def resolve_tracking_uri(recorded: str | None, run_dir: Path) -> str | None:
    """The recorded URI, unless it is a SQLite file that moved with the run directory."""
    local = run_dir / "mlflow.db"
    path = sqlite_path(recorded) if recorded else None
    if recorded and (path is None or path.is_file()):
        return recorded
    # Opening a missing SQLite path would silently create an empty store.
    return f"sqlite:///{local.resolve()}" if local.is_file() else None


def unreachable(uri: str, timeout: float = 5.0) -> str | None:
    """Why an HTTP tracking server cannot be used, checked quickly (MLflow's own retries take minutes)."""
    if not uri.startswith(("http://", "https://")):
        return None
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(uri.rstrip("/") + "/health", timeout=timeout):
            return None
    except (urllib.error.URLError, OSError) as err:
        return f"server not reachable ({getattr(err, 'reason', err)})"
