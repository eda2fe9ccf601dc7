"""The command line of a tool that writes one generated page of docs: write it, or `--check` that it is current."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path


def page_main(argv: list[str] | None, description: str, page: Path, repo: Path, command: str,
              render: Callable[[], str]) -> int:  # fmt: skip
    """Write `page` from `render()`, or with --check exit 1 (naming `command`) when it differs."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--check", action="store_true", help="exit 1 if the page differs from what it renders")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        stale = not page.is_file() or page.read_text() != text
        print(f"{page.relative_to(repo)} is stale: run {command}" if stale else "up to date")
        return int(stale)
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(text)
    print(f"wrote {page.relative_to(repo)}")
    return 0
