"""Tasks: embedded, generated and downloaded datasets behind one contract."""

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
