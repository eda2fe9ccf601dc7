"""`resources.gpu: auto` and `resources.pack: auto` resolved: how trials fill this machine's GPUs.

One small model (CIFAR's d64, 1 to 3 layers) leaves most of a GPU idle between kernel launches: on an H200 one
1-layer trial kept it 25 % busy, and 8 trials as 8 processes took turns rather than overlapping (3.6x one trial).
So a small model packs (sptune.training.packing: 8 trials of a stage as one fused model, its kernels batched),
two packs to a GPU, so that one pack's host work overlaps the other's kernels; where a pack cannot run (on a CPU,
where a fused pack trained fewer rows per core than one trial; or a spec a pack refuses), 8 trials share a GPU
as processes. A model past SMALL_WIDTH_X_DEPTH (ListOps' and Text's d512, 6 layers), or a task of long
sequences (PathX's 16,384 pixels, Retrieval's two 4,000-byte documents), fills a GPU's memory or time alone
and gets a whole one, unpacked. The spec is read before its data, so a task's sequence length is known here by
its name only.
"""

from __future__ import annotations

TRIALS_PER_GPU_SMALL = 8
MEMBERS_PER_PACK_SMALL = 8  # the pack the device kit's pack arms time (tools/device/gpu_epoch_arms.txt)
PACKS_PER_GPU = 2
# d_model x n_layers up to which a model counts as small (Image's d64 x 3, Pathfinder's d128 x 4).
SMALL_WIDTH_X_DEPTH = 512
LONG_SEQUENCE_TASKS = frozenset({"pathx", "retrieval", "text", "listops"})


def small_model(task: str, d_model: int, n_layers: int) -> bool:
    """Whether one trial of this model leaves a GPU mostly idle (see the module docstring)."""
    return d_model * n_layers <= SMALL_WIDTH_X_DEPTH and task not in LONG_SEQUENCE_TASKS


def auto_pack(small: bool, gpus: int, packable: bool) -> int:
    """The members per pack ``auto`` stands for: `MEMBERS_PER_PACK_SMALL` for a small model on a machine with
    GPUs where the spec allows packing (``packable``), else 1 (no packing)."""
    return MEMBERS_PER_PACK_SMALL if small and gpus > 0 and packable else 1


def auto_gpu_share(small: bool, gpus: int, pack: int = 1) -> float:
    """The GPU share per Ray trial (a pack is one) ``auto`` stands for with ``gpus`` GPUs on the machine."""
    if gpus <= 0:
        return 0.0
    if not small:
        return 1.0
    return 1.0 / PACKS_PER_GPU if pack > 1 else 1.0 / TRIALS_PER_GPU_SMALL
