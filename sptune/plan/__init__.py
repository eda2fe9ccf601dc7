"""The study plan: which searches a study runs, their rungs, seeds and cost.

`sptune.plan` is this package and also the Python API's dry run: `sptune.plan(spec, ...)` calls
`sptune.api.running.plan`. Importing any of its modules binds the name `plan` on `sptune` to this package,
so the package itself is what is called.
"""

from __future__ import annotations

import sys
import types
from typing import Any


class _PlanPackage(types.ModuleType):
    def __call__(self, spec: Any, **options: Any) -> Any:
        """The dry run as data: see `sptune.api.running.plan`."""
        from sptune.api.running import plan

        return plan(spec, **options)


sys.modules[__name__].__class__ = _PlanPackage
