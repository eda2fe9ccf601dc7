"""Headless Chromium for the tests that read a rendered page, with the flags this machine needs."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# No sandbox (tests run as root), no GPU, and no calls home: the network is closed here, and
# without the last three Chromium retries Google's hosts many times at every start.
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--no-first-run"]  # fmt: skip


def headless(profile: Path | str, *extra: str) -> list[str]:
    """The command line of a headless Chromium with its own fresh profile directory."""
    return [CHROMIUM, "--headless", *FLAGS, f"--user-data-dir={profile}", *extra]


REPO_SCREENSHOTS = Path(__file__).resolve().parent.parent / "dashboards" / "screenshots"
UPDATE_ENV = "SPTUNE_UPDATE_SCREENSHOTS"


def screenshot_path(name: str) -> Path:
    """Where a test saves its screenshot: the committed one (dashboards/README.md shows it) only when asked
    (SPTUNE_UPDATE_SCREENSHOTS=1), else a temporary folder, so a test run leaves the working tree clean."""
    folder = REPO_SCREENSHOTS if os.environ.get(UPDATE_ENV) == "1" else Path(tempfile.gettempdir()) / "sptune-shots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / name
