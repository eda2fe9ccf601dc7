"""Tasks: embedded, generated and downloaded datasets behind one contract.

- `base`: the contract (`TaskSplits`: train/val arrays, the test split behind `sptune.tasks.holdout`).
- `registry`: task name -> how to check and load it; `load_task` is the one entry point.
- one module per task family (`digits`, `image`, `listops`, `pathfinder`, `text`, `retrieval`,
  `bits`), each a reader of the official files plus, where offline data are possible, a
  generator (`pathfinder_generator` for Pathfinder, whose drawing is a module of its own).
- shared helpers: `sources` (``--data-dir`` or a generated set), `cache` (cache locations and
  generated sets), `prepared` (the memory-mapped array cache), `arrays` (padding, subsets,
  compaction), `skipped` (rows a reader skipped).

``python -m sptune.data`` (`sptune.data`) is the command line over all of this.
"""

from sptune.tasks.base import ArraySplit, TaskInfo, TaskSplits
from sptune.tasks.registry import TaskRequest, check_task, get_task, load_task, task_names

__all__ = [
    "ArraySplit",
    "TaskInfo",
    "TaskRequest",
    "TaskSplits",
    "check_task",
    "get_task",
    "load_task",
    "task_names",
]
