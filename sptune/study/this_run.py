"""The driver now running, as Tune callbacks unpickled from tuner.pkl on --resume must see it.

A resume may run in another process, on another machine, with another output directory than the
driver that pickled the Tuner's callbacks: before it restores a Tuner, `TunerRunner` fills `THIS_RUN`
("out": its output directory, "storage": its --storage, "experiment": the Tuner's folder under it,
"state_file": its one `StateFile`, which the stage recorder writes to),
and each callback's `__setstate__` takes these in place of the old driver's."""

from __future__ import annotations

from typing import Any

THIS_RUN: dict[str, Any] = {}
