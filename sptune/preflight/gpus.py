"""A study's GPU request against the GPUs that will run it, refused before anything starts: a trial asking
for more GPUs than any node has waits PENDING until the run times out, and one training on a GPU it did
not reserve shares a GPU Ray counts as free."""

from __future__ import annotations

from sptune.errors import SpecError
from sptune.spec import SweepSpec


def check_gpu_request(spec: SweepSpec, node_gpus: float, where: str) -> None:
    """Refuse ``spec`` unless one trial's `resources.gpu` fits on one node: ``node_gpus`` are the most GPUs one
    node offers, ``where`` names it ("this machine", "the Ray cluster's largest node")."""
    res = spec.resources
    if spec.training.device == "cuda" and res.gpu == 0:
        raise SpecError(
            "training.device", "is 'cuda' but resources.gpu is 0, so every trial would train on a GPU that Ray "
            "counts as free", "set resources.gpu (e.g. 0.125: 8 small trials share one GPU), or training.device: auto",
        )
    if res.gpu <= node_gpus:
        return
    has = f"has {node_gpus:g}" if node_gpus else "has no GPU"
    fit = f"set resources.gpu to at most {node_gpus:g} (a fraction such as 0.125 shares a GPU between trials) or 0"
    raise SpecError(
        "resources.gpu", f"asks for {res.gpu:g} GPU per trial but {where} {has}, so no trial could start "
        "(each would wait PENDING until the run times out)",
        f"{fit if node_gpus else 'set resources.gpu: 0'} to train on the CPUs, or run where the GPUs are (--address)",
    )
