"""A progress bar (tqdm, on stderr) for data preparation that takes a while: generating or
reading tens of thousands of Pathfinder images or ListOps trees can take minutes.

Shown only when it is worth it and someone watches: at least LONG items and stderr a
terminal, so test logs, `ray job` logs and redirected output stay clean. SPTUNE_PROGRESS_BAR=1
forces it on (to check it, or to see it in a log file); 0 turns it off.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from typing import Any

from tqdm import tqdm

BAR_ENV = "SPTUNE_PROGRESS_BAR"
LONG = 5000  # items: below this, preparation takes seconds and a bar is only noise


def _shown(total: int) -> bool:
    forced = os.environ.get(BAR_ENV, "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    return total >= LONG and sys.stderr.isatty()


def bar(iterable: Iterable | None, total: int, desc: str, unit: str = "it") -> Any:
    """tqdm over ``iterable`` (or, with None, a bar to ``update()`` by hand); a no-op bar when hidden."""
    return tqdm(
        iterable,
        total=total,
        desc=desc,
        unit=unit,
        file=sys.stderr,
        disable=not _shown(total),
        mininterval=0.5,  # redraws cost nothing measurable at this rate
        dynamic_ncols=True,
    )
