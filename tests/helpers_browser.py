"""Headless Chromium for the tests that read a rendered page, with the flags this machine needs."""

from __future__ import annotations

import shutil
from pathlib import Path

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# No sandbox (tests run as root), no GPU, and no calls home: the network is closed here, and
# without the last three Chromium retries Google's hosts many times at every start.
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--no-first-run"]  # fmt: skip


def headless(profile: Path | str, *extra: str) -> list[str]:
    """The command line of a headless Chromium with its own fresh profile directory."""
    return [CHROMIUM, "--headless", *FLAGS, f"--user-data-dir={profile}", *extra]
