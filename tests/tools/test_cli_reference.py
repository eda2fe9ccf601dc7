"""tools/cli_reference.py: docs/reference/cli.md is every command's and subcommand's `--help` as it prints now."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools"))
import cli_reference  # noqa: E402


def test_the_committed_page_is_what_the_commands_print():
    page = cli_reference.PAGE
    assert page.is_file() and page.read_text() == cli_reference.render(), (
        "docs/reference/cli.md is stale (a command's options or help changed): regenerate it with "
        f"`{cli_reference.COMMAND}` (or `python tools/spec_reference.py && python tools/cli_reference.py` for both)"
    )


def test_subcommands_get_their_own_help():
    text = cli_reference.render_command("sptune.jobs.__main__")
    assert "## `python -m sptune.jobs`" in text and "### `python -m sptune.jobs submit`" in text
    assert "usage: python -m sptune.jobs submit" in text
