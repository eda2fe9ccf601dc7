"""report.html's template: ``dashboards/report/`` at the repository's top level (``report.html.j2`` and its
stylesheet, inlined at render time so that the page stays one self-contained file), rendered with Jinja2.

``SPTUNE_DASHBOARDS_DIR`` points at another dashboards folder (a copy to restyle the page, or an installed
package whose repository folder is elsewhere)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import sptune
from sptune.report.records import ReportError

DASHBOARDS_ENV = "SPTUNE_DASHBOARDS_DIR"
TEMPLATE = "report.html.j2"
STYLESHEET = "report.css"


def dashboards_dir() -> Path:
    """The dashboards folder: $SPTUNE_DASHBOARDS_DIR, else the one beside the sptune package."""
    override = os.environ.get(DASHBOARDS_ENV)
    return Path(override) if override else Path(sptune.__file__).resolve().parents[1] / "dashboards"


def report_template_dir() -> Path:
    """dashboards/report, checked: a missing template is named with the fix, not a Jinja2 traceback."""
    folder = dashboards_dir() / "report"
    for name in (TEMPLATE, STYLESHEET):
        if not (folder / name).is_file():
            raise ReportError(str(folder / name), "the report template is missing",
                              f"run from a checkout of sptune, or set {DASHBOARDS_ENV} to a folder holding "
                              f"report/{TEMPLATE} and report/{STYLESHEET}")
    return folder


def render(context: dict[str, Any]) -> str:
    """The page: the template with context, its stylesheet inlined."""
    from jinja2 import Environment, FileSystemLoader, StrictUndefined
    from markupsafe import Markup

    folder = report_template_dir()
    # Autoescape everything: study, task and variant names come from user files. StrictUndefined: a name the
    # template expects but the context lacks is a bug to see, not an empty cell.
    env = Environment(loader=FileSystemLoader(folder), autoescape=True, undefined=StrictUndefined,
                      trim_blocks=True, lstrip_blocks=True)
    css = Markup((folder / STYLESHEET).read_text(encoding="utf-8"))  # our own file: trusted, not escaped
    return env.get_template(TEMPLATE).render(**context, css=css)
