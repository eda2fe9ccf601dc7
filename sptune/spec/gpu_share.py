"""`resources.gpu: auto` resolved: the GPU share per trial that fills this machine's GPUs with small models.

One small model (CIFAR's d64, 3 layers) leaves most of an H100 idle between kernel launches; 8 such trials on one
GPU overlap their launches. A model past
SMALL_WIDTH_X_DEPTH (ListOps' and Text's d512, 6 layers), or a task of long sequences (PathX's 16,384 pixels,
Retrieval's two 4,000-byte documents), fills a GPU's memory or time alone and gets a whole one. The spec is read
before its data, so a task's sequence length is known here by its name only.
"""

from __future__ import annotations

TRIALS_PER_GPU_SMALL = 8
# d_model x n_layers up to which a model counts as small (Image's d64 x 3, Pathfinder's d128 x 4).
SMALL_WIDTH_X_DEPTH = 512
LONG_SEQUENCE_TASKS = frozenset({"pathx", "retrieval", "text", "listops"})


def auto_gpu_share(task: str, d_model: int, n_layers: int, gpus: int) -> float:
    """The per-trial GPU share ``auto`` stands for with ``gpus`` GPUs on the machine."""
    if gpus <= 0:
        return 0.0
    small = d_model * n_layers <= SMALL_WIDTH_X_DEPTH and task not in LONG_SEQUENCE_TASKS
    return 1.0 / TRIALS_PER_GPU_SMALL if small else 1.0
